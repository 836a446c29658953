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
from typing import NoReturn

from dflash_host.models.hub_cache import (
    CHUNK,
    INCOMPLETE,
    LINK_SUFFIX,
    VerifiedRecords,
    blob_path,
    blobs_dir,
    etag_of,
    file_digest,
    is_linked,
    link_snapshot,
    read_manifest,
    record_fetched,
    repo_dir,
    snapshot_dir,
    snapshot_link,
    write_manifest,
    write_ref,
)
from dflash_host.models.hub_client import Answer, HubClient, HubError
from dflash_host.models.hub_http import server_of
from dflash_host.module import Context, ModuleError

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
NAME_MAX = 255 - len(LINK_SUFFIX)  # a part's bytes: the filesystem's 255, less the suffix of the link's temp name
PATH_MAX = 3000  # a path's bytes inside the snapshot: PATH_MAX (4096) less the cache's own folders
DIGEST_RE = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
PICKLED = ("*.bin", "*.pt", "*.pth", "*.pkl", "*.ckpt", "*.pickle")
PROGRESS_EVERY_S = 10.0
ATTEMPTS = 3  # a dropped connection resumes from the bytes already written


def patterns_of(args: dict) -> dict:
    """The models module's file selection (model_allow_patterns, model_ignore_patterns, models_allow_pickle)."""
    return {"allow": list(args["allow_patterns"]), "ignore": list(args["ignore_patterns"]), "pickle": bool(args["allow_pickle"])}


def client_for(args: dict, token: str | None) -> HubClient:
    """The client of hf_endpoint with the module's limits (on the host, or on the control node for the relay)."""
    if args["timeout_s"] <= 0 or args["min_rate_kib"] <= 0:
        raise ModuleError(f"models_timeout_s ({args['timeout_s']}) and models_min_rate_kib ({args['min_rate_kib']}) "
                          "must be above 0; fix them")
    try:
        return HubClient(args["hf_endpoint"], token, timeout=args["timeout_s"], min_rate=args["min_rate_kib"] * 1024)
    except HubError as exc:
        raise ModuleError(exc.msg) from None


def select_files(names: list, allow: list, ignore: list, allow_pickle: bool) -> list:
    """The repository's files to fetch: matching an allow pattern, no ignore pattern, no pickle unless asked."""
    refused = list(ignore) + ([] if allow_pickle else list(PICKLED))
    return sorted(n for n in names if any(fnmatch.fnmatch(n, p) for p in allow)
                  and not any(fnmatch.fnmatch(n, p) for p in refused))


def name_problem(name: str) -> str | None:
    """Why a repository path cannot be a file of the snapshot, in words; None when it can. The Hub's answer is
    data: a path must stay inside the snapshot, be one line of text, and fit the filesystem's limits (255 bytes
    a part, less the suffix of the link made beside it)."""
    parts = name.split("/")
    if not name or name.startswith("/") or "" in parts or "." in parts or ".." in parts:
        return "is empty, absolute, or has an empty, '.' or '..' part"
    control = CONTROL_RE.search(name)
    if control:
        return f"contains the control character U+{ord(control.group()):04X}"
    try:
        longest = max(len(p.encode("utf-8")) for p in parts)
    except UnicodeEncodeError:
        return "is not UTF-8 text"
    if longest > NAME_MAX:
        return (f"has a part of {longest} bytes; a part may have {NAME_MAX} (the filesystem's {NAME_MAX + len(LINK_SUFFIX)}, "
                f"less {len(LINK_SUFFIX)} for the link made beside it)")
    if len(name.encode("utf-8")) > PATH_MAX:
        return f"is {len(name.encode('utf-8'))} bytes long; a snapshot path takes at most {PATH_MAX}"
    return None


def safe_name(name: str) -> bool:
    """A repository path (or revision) that stays inside the snapshot and fits the filesystem."""
    return name_problem(name) is None


def names_problem(names: list) -> tuple[str, str] | None:
    """(name, why) for the first name that cannot be a file of one snapshot: its own problem, or being a folder
    of another name too (`a` and `a/b`); None when every name can."""
    for name in names:
        problem = name_problem(name)
        if problem:
            return name, problem
    files = set(names)
    for name in sorted(names):
        parts = name.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in files:
                return "/".join(parts[:i]), f"is a file, and a folder holding {shown(name)}"
    return None


def shown(name: str) -> str:
    """A name from a server, as a message may show it: escaped (no control character reaches a console), cut."""
    text = ascii(name)
    return text if len(text) <= 100 else text[:60] + "..." + text[-30:]


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
                raise ModuleError(f"{self.repo_id}@{self.revision}: {self.hub.endpoint} answered the commit "
                                  f"{shown(commit)}, which is not a commit id; check hf_endpoint")
        manifest = read_manifest(self.repo, commit)
        if manifest is None or manifest.get("patterns") != patterns:
            if not self.asked_hub:
                commit, names = self._ask(lambda: self.hub.revision(self.repo_id, commit))
            chosen = select_files(names, patterns["allow"], patterns["ignore"], patterns["pickle"])
            if not chosen:
                raise ModuleError(f"{self.repo_id}@{self.revision}: no file of the repository matches "
                                  f"model_allow_patterns {patterns['allow']} (pickled weights are only fetched with "
                                  "models_allow_pickle: true); change the patterns")
            self.check_names(chosen, f"{self.repo_id}@{commit}: {self.hub.endpoint} lists")
            info = self._ask(lambda: self.hub.paths_info(self.repo_id, commit, chosen))
            manifest = {"repo_id": self.repo_id, "commit": commit, "patterns": patterns,
                        "files": {name: self._entry(commit, name, info.get(name)) for name in chosen}}
            self.new_manifest = manifest
        self.commit, self.files = commit, manifest["files"]

    def _entry(self, commit: str, name: str, entry: dict | None) -> dict:
        """A file's manifest entry from the Hub's paths-info: a size and a digest it can be verified by."""
        if not entry or not isinstance(entry.get("size"), int) or not entry.get("oid"):
            raise ModuleError(f"{self.repo_id}@{commit}: the Hub gave no size or digest for {name}; "
                              "the file cannot be verified, so it is not fetched")
        etag = str(etag_of(entry))
        if not DIGEST_RE.match(etag) or entry["size"] < 0:  # the blob's file name: a hex digest, nothing else
            raise ModuleError(f"{self.repo_id}@{commit}: the Hub gave {name} the digest {shown(etag)}, which is "
                              "not a sha1 or sha256; check hf_endpoint (a mirror that is not HF-compatible?)")
        return {"size": entry["size"], "etag": etag, "lfs": bool(entry.get("sha256"))}

    def check_names(self, names: list, who: str) -> None:
        """Every name can be a file of the snapshot, or one error naming the first that cannot (before any byte)."""
        found = names_problem(names)
        if found is None:
            longest = max(names, key=lambda n: len(n.encode("utf-8")), default="")
            link = os.path.join(snapshot_dir(self.repo, "0" * 40), longest)
            if len(link.encode("utf-8")) + len(LINK_SUFFIX) < 4096:
                return
            found = longest, f"would be a path of {len(link.encode('utf-8'))} bytes under hf_home, past the 4096 a path takes"
        name, problem = found
        raise ModuleError(f"{who} the file {shown(name)}, which {problem}: it cannot be a file of the snapshot. "
                          "Leave it out with model_ignore_patterns, or fix the repository. Nothing was fetched.")

    def use_manifest(self, manifest: dict) -> None:
        """The commit and files the control node resolved (the relay and the air-gapped push): no Hub here."""
        files = manifest.get("files") if isinstance(manifest, dict) else None
        commit = manifest.get("commit") if isinstance(manifest, dict) else None
        if not isinstance(files, dict) or not isinstance(commit, str) or not COMMIT_RE.match(commit):
            raise ModuleError(f"{self.repo_id}: the control node's manifest has no commit or file list")
        for name, f in files.items():
            mode = f.get("mode", 0o644)
            if not DIGEST_RE.match(str(f.get("etag"))) or not isinstance(f.get("size"), int) or not (
                    isinstance(mode, int) and 0 <= mode <= 0o777):
                raise ModuleError(f"{self.repo_id}@{commit}: the control node's manifest names {shown(name)} badly")
        self.check_names(list(files), f"{self.repo_id}@{commit}: the control node's manifest lists")
        self.commit, self.files = commit, files
        self.new_manifest = dict(manifest)

    def install_uploaded(self, source: str) -> int:
        """Verify each blob the control node uploaded as <etag>.incomplete, rename it into place; its bytes."""
        write_manifest(self.repo, self.commit, self.new_manifest or {})
        record_fetched(self.repo, self.repo_id, self.commit, source)
        placed = 0
        for name, f in self.missing_blobs():
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
        os.chmod(partial, f.get("mode", 0o644))  # a pushed folder's file keeps its mode bits; the Hub's: 0644
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

    def missing_blobs(self) -> list:
        """(name, entry) of each missing blob once: files of the same bytes share one blob (a repository may hold
        a file twice, or link one to another), fetched or installed once."""
        seen: dict = {}
        for name in self.missing:
            seen.setdefault(self.files[name]["etag"], (name, self.files[name]))
        return list(seen.values())

    def need_bytes(self) -> int:
        total = 0
        for _, f in self.missing_blobs():
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
        os.makedirs(blobs_dir(self.repo), exist_ok=True)
        if self.new_manifest is not None:
            write_manifest(self.repo, self.commit, self.new_manifest)
        record_fetched(self.repo, self.repo_id, self.commit, self.hub.endpoint)
        progress = Progress(f"{self.repo_id}@{self.commit[:12]}", self.need_bytes(), ctx)
        taken = 0
        for name, f in self.missing_blobs():
            taken += self._fetch_blob(name, f, progress)
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
            except HubError as exc:  # dropped, cut short or past its deadline: resumed from the bytes written
                if attempt == ATTEMPTS:
                    raise ModuleError(f"{self.repo_id}@{self.commit}: {shown(name)} could not be fetched ({exc.msg}); "
                                      "run again: complete files are kept and this one resumes") from None
        self._place(name, f, partial, blob)
        return taken

    def _download(self, name: str, f: dict, partial: str, progress: Progress) -> int:
        """One request for what the partial file lacks. No more than the size the Hub lists is ever written: a
        server that sends (or announces) more loses the partial file, which cannot be right, and the run fails."""
        offset = os.path.getsize(partial) if os.path.isfile(partial) else 0
        if offset >= f["size"]:
            offset = 0
        with self.hub.open_file(self.repo_id, self.commit, name, offset, f["size"]) as answer:
            offset = self._resumed_at(name, f, answer, offset, partial)
            want = f["size"] - offset
            announced = content_length(answer)
            if announced is not None and announced > want:
                self._refuse(name, f, partial, answer, f"it announced {announced} bytes from byte {offset}")
            taken = self._write(name, answer, partial, offset, want, progress)
            if taken < want:
                raise HubError(f"{answer.server} ended {shown(name)} after {offset + taken} of its {f['size']} bytes",
                               "network")
            try:
                more = answer.read(1)
            except HubError:  # the file is whole; what the server does after it does not matter
                more = b""
            if more:
                self._refuse(name, f, partial, answer, "more bytes followed them")
        return taken

    def _resumed_at(self, name: str, f: dict, answer: Answer, offset: int, partial: str) -> int:
        """Where the answer's bytes start: 0 for a whole file, `offset` for a 206 whose Content-Range says so.
        Any other range cannot continue the partial file: it goes, and the next attempt starts at 0."""
        if answer.status != 206:
            return 0
        told = answer.headers.get("Content-Range") or ""
        found = re.fullmatch(r"bytes (\d+)-\d+/(\d+|\*)", told)
        if found and int(found.group(1)) == offset and found.group(2) in ("*", str(f["size"])):
            return offset
        remove_file(partial)
        raise HubError(f"{answer.server} answered {shown(name)} with the range {shown(told)} when asked from byte "
                       f"{offset} of {f['size']}; the partial file was removed", "server")

    def _write(self, name: str, answer: Answer, partial: str, offset: int, want: int, progress: Progress) -> int:
        """Copy at most `want` bytes of the answer into the partial file (appended at `offset`); the bytes written."""
        taken = 0
        try:
            with open(partial, "ab" if offset else "wb") as out:
                while taken < want:
                    chunk = answer.read(min(CHUNK, want - taken))
                    if not chunk:
                        break
                    out.write(chunk)
                    taken += len(chunk)
                    progress.add(len(chunk))
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            raise ModuleError(f"{self.repo_id}@{self.commit}: writing {partial} failed ({exc.strerror or exc}); free "
                              f"space at hf_home (or fix the folder), then run again: the {offset + taken} bytes of "
                              f"{shown(name)} written so far are kept and the fetch resumes there") from None
        return taken

    def _refuse(self, name: str, f: dict, partial: str, answer: Answer, what: str) -> NoReturn:
        """A file whose server sends other bytes than it describes: nothing of it is kept, and the run says who."""
        remove_file(partial)
        via = "" if answer.server == server_of(self.hub.endpoint) else f" (redirected there by {self.hub.endpoint})"
        raise ModuleError(f"{self.repo_id}@{self.commit}: {answer.server}{via} sent {shown(name)} longer than the "
                          f"{f['size']} bytes the Hub lists for it (paths-info): {what}. The download stopped there "
                          "and the partial file was removed; the server sends another file than it describes: check "
                          "hf_endpoint (a mirror or proxy that alters files?)")

    def link(self) -> None:
        for name, f in self.files.items():
            link_snapshot(self.repo, self.commit, name, f["etag"])
        if not COMMIT_RE.match(self.revision):
            write_ref(self.repo, self.revision, self.commit)


def content_length(answer: Answer) -> int | None:
    """The body's length the answer announces; None when it announces none (or nonsense)."""
    value = answer.headers.get("Content-Length")
    return int(value) if value is not None and value.strip().isdigit() else None


def remove_file(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def existing_parent(path: str) -> str:
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path
