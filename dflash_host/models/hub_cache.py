"""A Hugging Face cache the tool fills: the layout huggingface_hub and vLLM read, and what the tool proved.

`HF_HOME/hub/models--ORG--NAME/` holds `blobs/<etag>` (an LFS file's sha256 or a plain file's git
blob id, as huggingface_hub names them), `snapshots/<commit>/<path>` (relative symlinks to the blobs)
and `refs/<branch or tag>` (the commit). A blob is written as `blobs/<etag>.incomplete` and renamed into
place only once its digest matched, so vLLM and drafter-config never see a partial file.

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


def repo_dir(hf_home: str, repo_id: str) -> str:
    return os.path.join(hf_home, "hub", "models--" + repo_id.replace("/", "--"))


def blob_path(repo: str, etag: str) -> str:
    return os.path.join(repo, "blobs", etag)


def snapshot_dir(repo: str, commit: str) -> str:
    return os.path.join(repo, "snapshots", commit)


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
    try:
        with open(os.path.join(repo, "refs", revision), encoding="ascii") as fh:
            return fh.read().strip() or None
    except (OSError, UnicodeDecodeError):
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
    return os.path.basename(blobs) == "blobs" and is_tool_repo(os.path.dirname(blobs))
