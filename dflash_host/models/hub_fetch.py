"""Fetch one model repository at one revision into the tool's Hugging Face cache, verified and resumable.

`plan` resolves the revision (a commit already described is not asked again: a pinned model needs no
network on a no-change run), chooses the files by pattern, and checks what the cache holds: a blob whose
(size, mtime, inode) still match the record of its last verification is taken as is, any other is hashed
(`full` hashes every one). `fetch` checks the free disk against what is missing, then downloads each
missing blob to `<etag>.incomplete` (resuming where the server honours Range), verifies its digest,
renames it into place and links it into the snapshot. Nothing of the repository is imported or run.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import time

from dflash_host.models.hub_cache import (
    CHUNK,
    INCOMPLETE,
    VerifiedRecords,
    blob_path,
    etag_of,
    file_digest,
    is_linked,
    link_snapshot,
    read_manifest,
    record_fetched,
    repo_dir,
    snapshot_link,
    write_manifest,
    write_ref,
)
from dflash_host.models.hub_client import HubClient, HubError
from dflash_host.module import Context, ModuleError

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
DIGEST_RE = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
PICKLED = ("*.bin", "*.pt", "*.pth", "*.pkl", "*.ckpt", "*.pickle")
PROGRESS_EVERY_S = 10.0
ATTEMPTS = 3  # a dropped connection resumes from the bytes already written


def patterns_of(args: dict) -> dict:
    """The models module's file selection (model_allow_patterns, model_ignore_patterns, models_allow_pickle)."""
    return {"allow": list(args["allow_patterns"]), "ignore": list(args["ignore_patterns"]), "pickle": bool(args["allow_pickle"])}


def select_files(names: list, allow: list, ignore: list, allow_pickle: bool) -> list:
    """The repository's files to fetch: matching an allow pattern, no ignore pattern, no pickle unless asked."""
    refused = list(ignore) + ([] if allow_pickle else list(PICKLED))
    return sorted(n for n in names if any(fnmatch.fnmatch(n, p) for p in allow)
                  and not any(fnmatch.fnmatch(n, p) for p in refused) and safe_name(n))


def safe_name(name: str) -> bool:
    """A repository path that stays inside the snapshot (the Hub's answer is data, not trusted)."""
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and ".." not in parts and "" not in parts and "\0" not in name


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class Progress:
    """Bytes, rate and time left of one repository's fetch, said every PROGRESS_EVERY_S seconds."""

    def __init__(self, label: str, total: int, ctx: Context) -> None:
        self.label, self.total, self.ctx = label, total, ctx
        self.done = 0
        self.started = self.last = time.monotonic()

    def add(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            rate = self.done / max(now - self.started, 1e-6)
            left = (self.total - self.done) / rate if rate > 0 else 0
            self.ctx.say(f"{self.label}: {human_bytes(self.done)} of {human_bytes(self.total)}, "
                         f"{human_bytes(rate)}/s, {left:.0f} s left")


class RepoFetch:
    """One repository at one revision: what to fetch, then fetching it."""

    def __init__(self, client: HubClient | None, repo_id: str, revision: str, hf_home: str, patterns: dict) -> None:
        self.client, self.repo_id, self.revision = client, repo_id, revision
        self.repo = repo_dir(hf_home, repo_id)
        self.records = VerifiedRecords(self.repo)
        self.commit = ""  # set by describe()
        self.files: dict = {}
        self.missing: list = []
        self.corrupt: list = []
        self.asked_hub = False
        self.new_manifest: dict | None = None  # a description the cache does not hold yet (written when fetching)
        self.patterns = patterns  # {allow, ignore, pickle}: patterns_of(args)

    @property
    def hub(self) -> HubClient:
        if self.client is None:  # the relay's phases never ask the Hub from the host
            raise ModuleError(f"{self.repo_id}: no Hub client on this host (the control node relays the files)")
        return self.client

    # ------------------------------------------------------------------ plan
    def describe(self) -> None:
        """The commit and its chosen files, from the cache's manifest when it already holds this commit."""
        patterns = self.patterns
        commit = self.revision if COMMIT_RE.match(self.revision) else None
        if commit is None:
            commit, names = self._ask(lambda: self.hub.revision(self.repo_id, self.revision))
            if not COMMIT_RE.match(commit):  # a folder name in the cache: a commit id, nothing else
                raise ModuleError(f"{self.repo_id}@{self.revision}: the Hub answered the commit {commit[:80]!r}, "
                                  "which is not a commit id; check hf_endpoint")
        manifest = read_manifest(self.repo, commit)
        if manifest is None or manifest.get("patterns") != patterns:
            if not self.asked_hub:
                commit, names = self._ask(lambda: self.hub.revision(self.repo_id, commit))
            chosen = select_files(names, patterns["allow"], patterns["ignore"], patterns["pickle"])
            if not chosen:
                raise ModuleError(f"{self.repo_id}@{self.revision}: no file of the repository matches "
                                  f"model_allow_patterns {patterns['allow']} (pickled weights are only fetched with "
                                  "models_allow_pickle: true); change the patterns")
            info = self._ask(lambda: self.hub.paths_info(self.repo_id, commit, chosen))
            files = {}
            for name in chosen:
                entry = info.get(name)
                if not entry or not isinstance(entry.get("size"), int) or not entry.get("oid"):
                    raise ModuleError(f"{self.repo_id}@{commit}: the Hub gave no size or digest for {name}; "
                                      "the file cannot be verified, so it is not fetched")
                etag = str(etag_of(entry))
                if not DIGEST_RE.match(etag) or entry["size"] < 0:  # the blob's file name: a hex digest, nothing else
                    raise ModuleError(f"{self.repo_id}@{commit}: the Hub gave {name} the digest {etag[:80]!r}, which is "
                                      "not a sha1 or sha256; check hf_endpoint (a mirror that is not HF-compatible?)")
                files[name] = {"size": entry["size"], "etag": etag, "lfs": bool(entry.get("sha256"))}
            manifest = {"repo_id": self.repo_id, "commit": commit, "patterns": patterns, "files": files}
            self.new_manifest = manifest
        self.commit, self.files = commit, manifest["files"]

    def use_manifest(self, manifest: dict) -> None:
        """The commit and files the control node resolved (the relay and the air-gapped push): no Hub here."""
        files = manifest.get("files") if isinstance(manifest, dict) else None
        commit = manifest.get("commit") if isinstance(manifest, dict) else None
        if not isinstance(files, dict) or not isinstance(commit, str) or not COMMIT_RE.match(commit):
            raise ModuleError(f"{self.repo_id}: the control node's manifest has no commit or file list")
        for name, f in files.items():
            if not safe_name(name) or not DIGEST_RE.match(str(f.get("etag"))) or not isinstance(f.get("size"), int):
                raise ModuleError(f"{self.repo_id}@{commit}: the control node's manifest names {name!r} badly")
        self.commit, self.files = commit, files
        self.new_manifest = dict(manifest)

    def install_uploaded(self, source: str) -> int:
        """Verify each blob the control node uploaded as <etag>.incomplete, rename it into place; its bytes."""
        write_manifest(self.repo, self.commit, self.new_manifest or {})
        record_fetched(self.repo, self.repo_id, self.commit, source)
        placed = 0
        for name in self.missing:
            f = self.files[name]
            blob = blob_path(self.repo, f["etag"])
            partial = blob + INCOMPLETE
            if not os.path.isfile(partial):
                raise ModuleError(f"{self.repo_id}@{self.commit}: {name} was not uploaded; run again")
            self._place(name, f, partial, blob)
            placed += f["size"]
        self.records.save()
        return placed

    def _place(self, name: str, f: dict, partial: str, blob: str) -> None:
        """A downloaded or uploaded blob goes into place only with the size and digest the manifest lists."""
        digest = file_digest(partial, f["lfs"], f["size"])
        if os.path.getsize(partial) != f["size"] or digest != f["etag"]:
            os.unlink(partial)
            raise ModuleError(f"{self.repo_id}@{self.commit}: {name} arrived with another digest than the Hub "
                              f"lists ({digest[:12]}, expected {f['etag'][:12]}); it was removed. Run again; if it "
                              "repeats, the mirror (hf_endpoint) serves a different file")
        os.chmod(partial, 0o644)
        os.replace(partial, blob)
        self.records.remember(f["etag"], blob)

    def _ask(self, call):
        try:
            self.asked_hub = True
            return call()
        except HubError as exc:
            raise ModuleError(exc.msg) from None

    def check_present(self, full: bool) -> None:
        """Which blobs are missing or corrupt: stat against the record, hash what the record cannot vouch for."""
        for name, f in self.files.items():
            blob = blob_path(self.repo, f["etag"])
            if not os.path.isfile(blob):
                self.missing.append(name)
            elif not full and self.records.still_valid(f["etag"], blob):
                continue
            elif os.path.getsize(blob) == f["size"] and file_digest(blob, f["lfs"], f["size"]) == f["etag"]:
                self.records.remember(f["etag"], blob)
            else:
                self.corrupt.append(name)
                self.missing.append(name)

    def links_wrong(self) -> list:
        """The snapshot's files that do not (yet) point at their blob."""
        return [name for name, f in self.files.items()
                if not is_linked(*snapshot_link(self.repo, self.commit, name, f["etag"]))]

    def need_bytes(self) -> int:
        total = 0
        for name in self.missing:
            f = self.files[name]
            partial = blob_path(self.repo, f["etag"]) + INCOMPLETE
            total += f["size"] - (os.path.getsize(partial) if os.path.isfile(partial) else 0)
        return max(total, 0)

    # ------------------------------------------------------------------ fetch
    def check_disk(self, margin: int) -> None:
        need = self.need_bytes()
        where = existing_parent(self.repo)
        free = shutil.disk_usage(where).free
        if need + margin > free:
            raise ModuleError(
                f"{self.repo_id}@{self.commit}: not enough free disk at {where} (hf_home): {human_bytes(free)} free, "
                f"{human_bytes(need)} to fetch plus a margin of {human_bytes(margin)} (models_free_margin_gib); "
                "free space there or point hf_home at a larger disk. Nothing was fetched."
            )

    def bring_in(self, ctx: Context, margin: int) -> int:
        """Disk checked, every missing blob fetched and verified, the snapshot linked; the bytes taken."""
        taken = 0
        if self.missing:
            self.check_disk(margin)
            ctx.say(f"{self.repo_id}@{self.commit[:12]}: fetching {len(self.missing)} files ({human_bytes(self.need_bytes())})")
            taken = self.fetch(ctx)
        self.link()
        self.records.save()
        return taken

    def fetch(self, ctx: Context) -> int:
        """Download every missing blob, verified; the bytes taken from the server."""
        os.makedirs(os.path.join(self.repo, "blobs"), exist_ok=True)
        if self.new_manifest is not None:
            write_manifest(self.repo, self.commit, self.new_manifest)
        record_fetched(self.repo, self.repo_id, self.commit, self.hub.endpoint)
        progress = Progress(f"{self.repo_id}@{self.commit[:12]}", self.need_bytes(), ctx)
        taken = 0
        for name in self.missing:
            taken += self._fetch_blob(name, self.files[name], progress)
            self.records.save()
        return taken

    def _fetch_blob(self, name: str, f: dict, progress: Progress) -> int:
        blob = blob_path(self.repo, f["etag"])
        if os.path.exists(blob):  # corrupt: it goes, its record too
            os.unlink(blob)
            self.records.forget(f["etag"])
        partial = blob + INCOMPLETE
        taken = 0
        for attempt in range(1, ATTEMPTS + 1):
            try:
                taken += self._download(name, f, partial, progress)
                break
            except (OSError, HubError) as exc:
                if attempt == ATTEMPTS:
                    why = exc.msg if isinstance(exc, HubError) else str(exc)
                    raise ModuleError(f"{self.repo_id}@{self.commit}: {name} could not be fetched ({why}); "
                                      "run again: complete files are kept and this one resumes") from None
        self._place(name, f, partial, blob)
        return taken

    def _download(self, name: str, f: dict, partial: str, progress: Progress) -> int:
        offset = os.path.getsize(partial) if os.path.isfile(partial) else 0
        if offset >= f["size"]:
            offset = 0
        resp = self.hub.open_file(self.repo_id, self.commit, name, offset)
        with resp:
            resumed = offset > 0 and resp.status == 206
            with open(partial, "ab" if resumed else "wb") as out:
                taken = 0
                read = getattr(resp, "read1", resp.read)  # what has arrived, not a whole chunk's worth
                while True:
                    chunk = read(CHUNK)
                    if not chunk:
                        break
                    out.write(chunk)
                    taken += len(chunk)
                    progress.add(len(chunk))
                out.flush()
                os.fsync(out.fileno())
        return taken

    def link(self) -> None:
        for name, f in self.files.items():
            link_snapshot(self.repo, self.commit, name, f["etag"])
        if not COMMIT_RE.match(self.revision):
            write_ref(self.repo, self.revision, self.commit)


def existing_parent(path: str) -> str:
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path
