"""A Hugging Face cache the tool fills: the layout huggingface_hub and vLLM read, and what the tool proved.

`HF_HOME/hub/models--ORG--NAME/` holds `blobs/<etag>` (an LFS file's sha256 or a plain file's git
blob id, as huggingface_hub names them), `snapshots/<commit>/<path>` (relative symlinks to the blobs)
and `refs/<branch or tag>` (the commit). A blob is written as `blobs/<etag>.incomplete` and renamed into
place only once its digest matched, so vLLM and drafter-config never see a partial file. This module is the
one that spells that layout (HF_HOME/hub, models--, blobs, snapshots, refs): the locator
(dflash_host.models.config), the fetch (hub_fetch) and library/models.py call its functions
(tests/dflash_host/test_one_reader.py keeps it so).

Beside them, files of the tool's own (never read by huggingface_hub):
- `.dfp-fetched.json`: the marker that the tool fetched this repository (teardown --purge-models removes
  only repositories with it), with the commits it fetched;
- `.dfp-manifests/<commit>.json`: the files of that commit as the Hub described them (size, etag, LFS);
- `.dfp-verified.json`: per blob, the (size, mtime_ns, inode) it had when its digest last matched, so a
  no-change run stats the files instead of reading 54 GB.
"""

from __future__ import annotations

import hashlib
import json
import os

from dflash_host.host.files import atomic_write, read_json

TYPE_CHECKING = False  # true for mypy; typing is never imported on the host (as in dflash_host/module.py)
if TYPE_CHECKING:  # annotations only
    from collections.abc import Mapping

MARKER = ".dfp-fetched.json"
MANIFESTS = ".dfp-manifests"
VERIFIED = ".dfp-verified.json"
INCOMPLETE = ".incomplete"
LINK_SUFFIX = ".dfp-link"  # a snapshot link is made beside its place, then renamed over it
CHUNK = 4 * 2**20


def write_file(path: str, data: bytes) -> None:
    """atomic_write, its folder made first (the cache's folders appear as a fetch needs them)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, data)


HUB = "hub"  # HF_HOME/hub: the cache huggingface_hub reads
REPO_PREFIX = "models--"  # a model repository's folder in it: models--ORG--NAME


def hub_dir(hf_home: str) -> str:
    """The cache folder of an HF_HOME (HF_HOME/hub)."""
    return os.path.join(hf_home, HUB)


def host_hub_dir(environ: Mapping[str, str]) -> str:
    """The host's own Hugging Face cache, as huggingface_hub finds it: HF_HUB_CACHE (or the older
    HUGGINGFACE_HUB_CACHE), else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    own_home = environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return environ.get("HF_HUB_CACHE") or environ.get("HUGGINGFACE_HUB_CACHE") or hub_dir(own_home)


def repo_in(hub: str, repo_id: str) -> str:
    """A repository's folder in a cache folder (`hub`: HF_HOME/hub or HF_HUB_CACHE)."""
    return os.path.join(hub, REPO_PREFIX + repo_id.replace("/", "--"))


def repo_dir(hf_home: str, repo_id: str) -> str:
    return repo_in(hub_dir(hf_home), repo_id)


def is_repo_name(name: str) -> bool:
    """A folder name of the cache that is a model repository's (models--ORG--NAME)."""
    return name.startswith(REPO_PREFIX)


def blobs_dir(repo: str) -> str:
    return os.path.join(repo, "blobs")


def blob_path(repo: str, etag: str) -> str:
    return os.path.join(blobs_dir(repo), etag)


def snapshot_dir(repo: str, commit: str) -> str:
    return os.path.join(repo, "snapshots", commit)


def snapshot_dirs(repo: str) -> list:
    """The paths of every entry of the repository's snapshots folder ([] when it has none)."""
    snapshots = os.path.join(repo, "snapshots")
    try:
        return [os.path.join(snapshots, d) for d in os.listdir(snapshots)]
    except OSError:
        return []


def etag_of(entry: dict) -> str:
    """The blob name huggingface_hub gives a file: its LFS sha256, else its git blob id."""
    return entry.get("sha256") or entry["oid"]


def file_digest(path: str, lfs: bool, size: int) -> str:
    """sha256 of the bytes (LFS files), or the git blob id (sha1 of 'blob SIZE\\0' + bytes)."""
    hasher = hashlib.sha256() if lfs else hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(CHUNK)
            if not chunk:
                break
            hasher.update(chunk)
    return hasher.hexdigest()


def stat_key(path: str) -> list | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


class VerifiedRecords:
    """The per-blob record of a digest that matched, keyed by etag; saved atomically."""

    def __init__(self, repo: str) -> None:
        self.path = os.path.join(repo, VERIFIED)
        data = read_json(self.path) or {}
        self.records: dict = data.get("blobs", {}) if isinstance(data.get("blobs"), dict) else {}

    def still_valid(self, etag: str, path: str) -> bool:
        key = stat_key(path)
        return key is not None and self.records.get(etag) == key

    def remember(self, etag: str, path: str) -> None:
        self.records[etag] = stat_key(path)

    def forget(self, etag: str) -> None:
        self.records.pop(etag, None)

    def save(self) -> None:
        write_file(self.path, (json.dumps({"blobs": self.records}, sort_keys=True) + "\n").encode())


def read_manifest(repo: str, commit: str) -> dict | None:
    data = read_json(os.path.join(repo, MANIFESTS, commit + ".json"))
    return data if isinstance(data, dict) and isinstance(data.get("files"), dict) else None


def write_manifest(repo: str, commit: str, manifest: dict) -> None:
    write_file(os.path.join(repo, MANIFESTS, commit + ".json"), (json.dumps(manifest, sort_keys=True) + "\n").encode())


def read_ref(repo: str, revision: str) -> str | None:
    """The commit refs/REVISION names; None when there is no such ref or it is not ASCII (or the revision cannot
    be a file name)."""
    try:
        with open(os.path.join(repo, "refs", revision), encoding="ascii") as fh:
            return fh.read().strip() or None
    except (OSError, ValueError):
        return None


def write_ref(repo: str, revision: str, commit: str) -> None:
    write_file(os.path.join(repo, "refs", revision), commit.encode("ascii"))


def snapshot_link(repo: str, commit: str, rfilename: str, etag: str) -> tuple[str, str]:
    """(snapshots/COMMIT/PATH, its target ../../blobs/ETAG relative to it, as huggingface_hub links)."""
    link = os.path.join(snapshot_dir(repo, commit), rfilename)
    return link, os.path.relpath(blob_path(repo, etag), os.path.dirname(link))


def is_linked(link: str, target: str) -> bool:
    try:
        return os.readlink(link) == target
    except OSError:
        return False


def link_snapshot(repo: str, commit: str, rfilename: str, etag: str) -> bool:
    """Point snapshots/COMMIT/PATH at its blob (atomically); True when it changed."""
    link, target = snapshot_link(repo, commit, rfilename, etag)
    if is_linked(link, target):
        return False
    os.makedirs(os.path.dirname(link), exist_ok=True)
    tmp = link + LINK_SUFFIX
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)
    return True


def record_fetched(repo: str, repo_id: str, commit: str, source: str) -> None:
    """The marker that this repository is the tool's (teardown --purge-models), with the commits fetched."""
    path = os.path.join(repo, MARKER)
    data = read_json(path) or {}
    commits = [c for c in data.get("commits", []) if c != commit] + [commit]
    write_file(path, (json.dumps({"tool": "dflash-provision", "repo_id": repo_id, "commits": commits,
                                    "source": source}, sort_keys=True) + "\n").encode())


def is_tool_repo(repo: str) -> bool:
    data = read_json(os.path.join(repo, MARKER))
    return isinstance(data, dict) and data.get("tool") == "dflash-provision"


def is_verified_file(path: str) -> bool:
    """A snapshot file of a repository the tool fetched: a symlink into that repository's blobs."""
    if not os.path.islink(path):
        return False
    real = os.path.realpath(path)
    blobs = os.path.dirname(real)
    return blobs_dir(os.path.dirname(blobs)) == blobs and is_tool_repo(os.path.dirname(blobs))
