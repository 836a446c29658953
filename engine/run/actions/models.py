"""The `models` task when the control node carries the files: a fleet fetches each file from outside once.

Two sources, one path to the hosts:
- `models_via: control_node`: the control node fetches each repository at its revision into its own
  Hugging Face cache (`models_relay_cache`), once per run whatever the number of hosts (one lock per
  repository; every host of the run gets the same commit), verified as a host verifies;
- `models_source_dir` (air-gapped): a folder on the control node holding ORG/NAME model folders; its files
  are hashed once (a record keyed by size, mtime and inode keeps the digests between runs) and named by a
  commit made from their digests. A symlink leading out of the model's folder is refused, and each file keeps
  its mode bits on the hosts.
Then, per host, the host module plans (what its cache lacks, by its own fast verification), the control
node uploads only those blobs over the host's connection into `<etag>.incomplete`, and the host module
installs them after checking each digest. A second run sends nothing.

The Hub's code here is the host package's (dflash_host.models.hub_*), run on the control node, with the same
checks of what a server sends; the token file is read by the hosts' one reader (dflash_host.host.tokens) and
the token joins the run's secrets. The engine itself knows nothing of models beyond this action.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
import weakref
from pathlib import Path
from typing import Any

from dflash_host.host.tokens import read_secret
from dflash_host.models import hub_cache
from dflash_host.models.config import is_hub_id
from dflash_host.models.hub_client import HubError
from dflash_host.models.hub_fetch import RepoFetch, client_for, names_problem, patterns_of, safe_name, select_files, shown
from dflash_host.module import ModuleError, check_args
from engine.errors import TaskError
from engine.playbook.modulespec import module_args_spec
from engine.run.actions.call import ActionCall

ROLES = (("target", "target_model", "target_revision"), ("drafter", "drafter_model", "drafter_revision"))
_locks: dict = {}
_locks_guard = threading.Lock()
_runs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # executor -> {key: manifest}: once per run


def _lock(key: tuple) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


class _Say:
    """A module Context for the control node's own fetch: progress shown as the host's, warnings kept."""

    def __init__(self, call: ActionCall) -> None:
        self.check, self.diff = call.check, False
        self.warnings: list = []
        console, host, secrets = call.executor.console, call.state.host.name, call.executor.variables.secrets
        self.progress = (lambda msg: console.progress(host, secrets.redact(f"control node: {msg}"))) if console else None

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)

    def say(self, msg: str) -> None:
        if self.progress:
            self.progress(msg)


def _hub_manifest(call: ActionCall, args: dict, repo_id: str, revision: str) -> tuple[dict, str]:
    """(manifest, the control node's cache folder of the repository), fetched there once per run."""
    try:  # relayed: the token file is the control node's, read by the same reader as on a host
        token = read_secret(args.get("hf_token"), args.get("hf_token_file"), "hf_token")
    except ModuleError as exc:
        raise TaskError(f"{call.where()}: on the control node: {exc.msg} (with models_via: control_node the token "
                        "file is the control node's)") from None
    if token:
        call.executor.variables.secrets.add(token)  # masked wherever it could show, though nothing shows it
    cache_home = os.path.expanduser(args["relay_cache"])
    try:
        job = RepoFetch(client_for(args, token), repo_id, revision, cache_home, patterns_of(args))
        job.describe()
        job.check_present(args["verify"] == "full")
        if not call.check:
            job.bring_in(_Say(call), int(args["free_margin_gib"] * 2**30))  # type: ignore[arg-type]
    except (ModuleError, HubError) as exc:
        raise TaskError(f"{call.where()}: on the control node: {exc.msg}") from None
    manifest = {"repo_id": repo_id, "commit": job.commit, "files": job.files, "source": job.hub.endpoint,
                "patterns": job.patterns}
    return manifest, job.repo


def _folder_manifest(call: ActionCall, args: dict, repo_id: str) -> tuple[dict, str]:
    """(manifest, folder) of ORG/NAME under the control node's source folder; digests kept between runs. Each
    file keeps its mode bits on the hosts (a 0600 file is not made readable to all there)."""
    folder = Path(os.path.expanduser(args["source_dir"])) / repo_id
    if not folder.is_dir():
        raise TaskError(f"{call.where()}: models_source_dir has no folder {folder} for {repo_id}; put the model's "
                        "files there (ORG/NAME, as the Hub names it) or fix models_source_dir")
    patterns = patterns_of(args)
    chosen = select_files(_source_files(call, folder), patterns["allow"], patterns["ignore"], patterns["pickle"])
    if not chosen:
        raise TaskError(f"{call.where()}: {folder} holds no file matching model_allow_patterns {args['allow_patterns']}")
    bad = names_problem(chosen)
    if bad:
        raise TaskError(f"{call.where()}: models_source_dir: {folder} holds the file {shown(bad[0])}, which {bad[1]}: "
                        "it cannot be a file of a snapshot on the hosts. Rename it, or leave it out with "
                        "model_ignore_patterns. Nothing was sent.")
    digests = _DigestRecord(Path(os.path.expanduser(args["relay_cache"])) / "source-digests.json")
    files = {}
    for name in chosen:
        st = (folder / name).stat()
        files[name] = {"size": st.st_size, "etag": digests.sha256(folder / name), "lfs": True,
                       "mode": stat.S_IMODE(st.st_mode) & 0o777}
    digests.save()
    listing = json.dumps(sorted((n, f["etag"]) for n, f in files.items())).encode()
    commit = hashlib.sha1(listing, usedforsecurity=False).hexdigest()  # named by content: same files, same commit
    return {"repo_id": repo_id, "commit": commit, "files": files, "source": f"control node {folder}"}, str(folder)


def _source_files(call: ActionCall, folder: Path) -> list:
    """The files a source folder holds, by relative name (hidden ones left out). A symlink that leads out of the
    folder is refused: the push sends the model's files, never another file of the control node."""
    root, names = folder.resolve(), []
    for dirpath, dirnames, filenames in os.walk(folder):  # symlinked folders are not entered
        for entry in sorted(dirnames + filenames):
            path = Path(dirpath) / entry
            if entry.startswith("."):
                continue
            if path.is_symlink() and not Path(os.path.realpath(path)).is_relative_to(root):
                raise TaskError(f"{call.where()}: models_source_dir: {path} is a symlink to {os.path.realpath(path)}, "
                                f"outside {folder}; the push sends only the model folder's own files. Copy the file "
                                "in (or link within the folder), or remove the link. Nothing was sent.")
            if entry in filenames and path.is_file():
                names.append(str(path.relative_to(folder)))
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
    return sorted(names)


class _DigestRecord:
    """sha256 of the control node's source files, reused while (size, mtime, inode) do not change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.data = json.loads(path.read_text())
        except (OSError, ValueError):
            self.data = {}
        self.changed = False

    def sha256(self, file: Path) -> str:
        key, stamp = str(file.resolve()), hub_cache.stat_key(str(file))
        known = self.data.get(key)
        if known and known[0] == stamp:
            return known[1]
        digest = hub_cache.file_digest(str(file), True, file.stat().st_size)
        self.data[key] = [stamp, digest]
        self.changed = True
        return digest

    def save(self) -> None:
        if self.changed:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data))
            os.replace(tmp, self.path)


def _manifests(call: ActionCall, args: dict) -> dict:
    """{role: (manifest, local folder)} for each model that is a Hub id, resolved once per run."""
    memo = _runs.setdefault(call.executor, {})
    out = {}
    for role, var, rev in ROLES:
        repo_id, revision = args.get(var), str(args.get(rev) or "main")
        if not isinstance(repo_id, str) or not is_hub_id(repo_id):
            continue
        if not safe_name(str(revision)):
            raise TaskError(f"{call.where()}: {rev} {revision!r} is not a commit, branch or tag name; fix {rev}")
        source = args.get("source_dir") or args.get("hf_endpoint")
        key = (source, repo_id, revision, json.dumps([args["allow_patterns"], args["ignore_patterns"], args["allow_pickle"]]))
        with _lock(key):
            if key not in memo:
                memo[key] = (_folder_manifest(call, args, repo_id) if args.get("source_dir")
                             else _hub_manifest(call, args, repo_id, revision))
        out[role] = memo[key]
    return out


def _local_file(manifest: dict, local: str, etag: str) -> tuple[str, int]:
    """(the control node's copy of a blob, its size): its relay cache blob, or the source folder's file."""
    name, entry = next((n, f) for n, f in manifest["files"].items() if f["etag"] == etag)
    if manifest["source"].startswith("control node "):
        return os.path.join(local, name), entry["size"]
    return hub_cache.blob_path(local, etag), entry["size"]


def models_via_control_node(call: ActionCall) -> dict:
    """Resolve (and fetch once) on the control node, plan on the host, send what it lacks, install there."""
    args = check_args(module_args_spec("models") or {}, dict(call.args), "models")
    found = _manifests(call, args)
    host_args = {k: v for k, v in call.args.items() if k not in ("hf_token", "hf_token_file", "source_dir")}
    host_args["manifests"] = {role: m for role, (m, _) in found.items()}
    plan = call.module("models", dict(host_args, phase="plan"))
    if plan.get("failed") or call.check or not plan.get("changed"):
        return _relay_result(plan, sent=0)
    sent = 0
    for role, (manifest, local) in found.items():
        for etag, remote in (plan["models"][role].get("needed") or {}).items():
            check_needed(call, manifest, etag, remote)
            path, size = _local_file(manifest, local, etag)
            try:
                call.on.client.put(path, remote)
            except OSError as exc:
                reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
                raise TaskError(f"{call.where()}: sending {path} to {remote} failed: {reason}; the host keeps what it "
                                "had (a partial upload is never in the snapshot). Free space there and run again.") from None
            sent += size
    return _relay_result(call.module("models", dict(host_args, phase="install")), sent)


def check_needed(call: ActionCall, manifest: dict, etag: Any, remote: Any) -> None:
    """What a host asks for is data: only a blob of the manifest, only into that blob's .incomplete file."""
    known = {f["etag"] for f in manifest["files"].values()}
    if etag not in known or not isinstance(remote, str) or not remote.endswith(f"/blobs/{etag}{hub_cache.INCOMPLETE}"):
        raise TaskError(f"{call.where()}: the host asked for {str(etag)[:80]!r} at {str(remote)[:120]!r}, which is not a "
                        f"file of {manifest['repo_id']}@{manifest['commit'][:12]}; nothing was sent")


def _relay_result(result: dict, sent: int) -> dict:
    result["bytes_sent"] = sent
    for m in (result.get("models") or {}).values():
        if isinstance(m, dict):
            m.pop("needed", None)
    return result

