"""The Hugging Face Hub's HTTP API, as far as fetching a model repository needs it (standard library only).

Three calls, all answered alike by the Hub and by HF-compatible mirrors (olah, hf-mirror, proxies):
`revision` (GET /api/models/ID/revision/REV: the commit a revision names and the repository's file
names), `paths_info` (POST /api/models/ID/paths-info/COMMIT: each file's size, git blob id and, for LFS
files, sha256) and `open_file` (GET /ID/resolve/COMMIT/PATH, from an offset when the server honours
Range). model_info (/api/models/ID) is not used: mirrors in offline mode refuse it.

No server is trusted (dflash_host/models/hub_http.py): every request has an overall deadline (timeout_s for
the API's answers; for a file, timeout_s plus its size at min_rate bytes a second), and the token goes only
into the Authorization header of requests to the endpoint's own origin: a redirect that changes the scheme,
host or port is followed without it. Whatever fails, the error is a HubError whose message names the
repository, the server and the fix; no exception of the HTTP library reaches a message (one of them once
quoted the whole `Authorization: Bearer ...` header), and the token is cut out of any text that held it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from dflash_host.host.tokens import secret_problem
from dflash_host.models.hub_http import Deadline, RedirectRefused, open_request, opener, server_of

USER_AGENT = "dflash-provision (stdlib urllib)"
PATHS_PER_REQUEST = 100  # paths-info takes the paths as form fields; keep each request small
MAX_METADATA_BYTES = 32 * 2**20  # a repository's metadata is KB to a few MB
MIN_RATE = 256 * 1024  # bytes a second a file's request must keep up on average (models_min_rate_kib)


class HubError(Exception):
    """A Hub request that failed; `kind` is repo, revision, auth, gated, network, deadline, server or config."""

    def __init__(self, msg: str, kind: str) -> None:
        super().__init__(msg)
        self.msg = msg
        self.kind = kind


class Answer:
    """One response being read under its request's deadline; every failure of a read is a HubError."""

    def __init__(self, resp: Any, deadline: Deadline, client: HubClient, what: str) -> None:
        self.resp, self.deadline, self.client, self.what = resp, deadline, client, what
        self.status: int = resp.status
        self.headers = resp.headers
        self.server = server_of(resp.geturl())  # who sent the bytes: the endpoint, or where it redirected
        self._read = getattr(resp, "read1", resp.read)  # what has arrived, not a whole chunk's worth

    def read(self, n: int) -> bytes:
        try:
            data = self._read(n)
        except Exception as exc:  # noqa: BLE001 - the HTTP library's own errors quote what they saw
            raise self.client.failure(exc, self.deadline, self.what) from None
        if not data and n and self.deadline.expired:
            raise self.client.failure(TimeoutError(), self.deadline, self.what)
        return data

    def read_all(self, limit: int) -> bytes:
        """The body, up to `limit` bytes (a longer one is cut there: the caller sees it is too long)."""
        parts, got = [], 0
        while got < limit:
            chunk = self.read(min(limit - got, 2**20))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def close(self) -> None:
        self.deadline.cancel()
        self.resp.close()

    def __enter__(self) -> Answer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class HubClient:
    """Requests to one endpoint (the Hub or a mirror) for model repositories, with an optional token."""

    def __init__(self, endpoint: str, token: str | None = None, timeout: float = 60.0,
                 min_rate: float = MIN_RATE) -> None:
        parts = urllib.parse.urlsplit(str(endpoint))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise HubError(f"hf_endpoint {endpoint!r} is not an http(s) address; set it to the Hub "
                           "(https://huggingface.co) or a mirror's address, e.g. http://mirror.lan:8090", "config")
        problem = secret_problem(token) if token else None
        if problem:  # the token reader refuses these first; a header must never be built from one
            raise HubError(f"the Hub token {problem}; it must be one word of printable ASCII: fix hf_token or "
                           "hf_token_file", "config")
        self.endpoint = endpoint.rstrip("/")
        self.token = token or None
        self.timeout = timeout
        self.min_rate = max(float(min_rate), 1.0)
        self._opener = opener()

    def _open(self, url: str, what: str, seconds: float, data: bytes | None = None,
              headers: dict | None = None) -> Answer:
        """The answer to one request, under a deadline of `seconds` (HTTPError: the caller names the status)."""
        deadline = Deadline(seconds)
        # noqa below: the endpoint's scheme is checked to be http(s) in __init__
        req = urllib.request.Request(url, data=data, headers={"User-Agent": USER_AGENT, **(headers or {})})  # noqa: S310
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            return Answer(open_request(self._opener, req, deadline, self.timeout), deadline, self, what)
        except urllib.error.HTTPError:
            deadline.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - see failure()
            deadline.cancel()
            raise self.failure(exc, deadline, what) from None

    def failure(self, exc: BaseException, deadline: Deadline, what: str) -> HubError:
        """What went wrong, in words: never the exception's own text where it could quote a header."""
        if isinstance(exc, HubError):
            return exc
        if isinstance(exc, RedirectRefused):
            return HubError(self._scrub(f"{what}: {exc.msg}; check hf_endpoint"), "server")
        if deadline.expired:
            return HubError(f"{self.endpoint}: {what} did not arrive within {deadline.seconds:.0f} s (the request's "
                            "deadline: models_timeout_s, and for a file its size at models_min_rate_kib); the server "
                            "answers too slowly or trickles its answer. Check hf_endpoint, or raise those limits", "deadline")
        if isinstance(exc, (urllib.error.URLError, OSError)):
            return self._network_error(exc)
        return HubError(f"{self.endpoint}: {what}: the answer is not valid HTTP ({type(exc).__name__}); is "
                        "hf_endpoint a Hub or an HF-compatible mirror?", "server")

    def _scrub(self, text: str) -> str:
        return text.replace(self.token, "********") if self.token else text

    def _json(self, url: str, what: str, repo: str, revision: str, data: bytes | None = None) -> Any:
        label = f"the {what} of {repo}@{revision}"
        try:
            answer = self._open(url, label, self.timeout, data=data, headers={"Accept": "application/json"})
        except urllib.error.HTTPError as exc:
            exc.close()  # its body is never read: the status and X-Error-Code say what went wrong
            raise self._http_error(exc, repo, revision) from None
        with answer:
            body = answer.read_all(MAX_METADATA_BYTES + 1)
        if len(body) > MAX_METADATA_BYTES:
            raise HubError(f"{self.endpoint}: {label} is larger than {MAX_METADATA_BYTES >> 20} MiB", "server")
        try:
            return json.loads(body)
        except ValueError:
            raise HubError(f"{self.endpoint}: {label} is not JSON; is hf_endpoint a Hub "
                           "or an HF-compatible mirror?", "server") from None

    def revision(self, repo: str, revision: str) -> tuple[str, list[str]]:
        """The commit `revision` (commit, branch or tag) names, and the file names of the repository there."""
        url = f"{self.endpoint}/api/models/{repo}/revision/{urllib.parse.quote(revision, safe='')}"
        info = self._json(url, "revision", repo, revision)
        commit = info.get("sha") if isinstance(info, dict) else None
        siblings = info.get("siblings") if isinstance(info, dict) else None
        if not isinstance(commit, str) or not isinstance(siblings, list):
            raise HubError(f"{self.endpoint}: the answer for {repo}@{revision} has no commit or file list", "server")
        names = [s["rfilename"] for s in siblings if isinstance(s, dict) and isinstance(s.get("rfilename"), str)]
        return commit, names

    def paths_info(self, repo: str, commit: str, paths: list[str]) -> dict[str, dict]:
        """path -> {size, oid (git blob id), sha256 (LFS files only)} at `commit`."""
        out: dict[str, dict] = {}
        url = f"{self.endpoint}/api/models/{repo}/paths-info/{commit}"
        for start in range(0, len(paths), PATHS_PER_REQUEST):
            chunk = paths[start:start + PATHS_PER_REQUEST]
            form = urllib.parse.urlencode([("paths", p) for p in chunk] + [("expand", "false")]).encode()
            for entry in self._json(url, "file list", repo, commit, data=form) or []:
                if not isinstance(entry, dict) or entry.get("type", "file") != "file" or not isinstance(entry.get("path"), str):
                    continue
                lfs = entry["lfs"] if isinstance(entry.get("lfs"), dict) else {}
                out[entry["path"]] = {"size": entry.get("size"), "oid": entry.get("oid"),
                                      "sha256": lfs.get("oid") or lfs.get("sha256")}
        return out

    def open_file(self, repo: str, commit: str, path: str, offset: int = 0, size: int = 0) -> Answer:
        """The answer for a file's bytes from `offset` (status 206 when the server resumed there), due within
        timeout plus the `size - offset` bytes at min_rate."""
        url = f"{self.endpoint}/{repo}/resolve/{commit}/{urllib.parse.quote(path)}"
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        seconds = self.timeout + max(size - offset, 0) / self.min_rate
        try:
            return self._open(url, f"{repo}@{commit} file {path!r}", seconds, headers=headers)
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code == 416 and offset:  # the partial file is already whole (or longer): start again
                return self.open_file(repo, commit, path, 0, size)
            raise self._http_error(exc, repo, commit, path) from None

    def _network_error(self, exc: Exception) -> HubError:
        reason = self._scrub(str(getattr(exc, "reason", exc)))[:300]
        return HubError(f"{self.endpoint} cannot be reached from this host ({reason}); check hf_endpoint, the "
                        "host's network or proxy, or push the models from the control node (models_source_dir)",
                        "network")

    def _http_error(self, exc: urllib.error.HTTPError, repo: str, revision: str, path: str | None = None) -> HubError:
        code = (exc.headers.get("X-Error-Code") or "") if exc.headers else ""
        what = f"{repo}@{revision}" + (f" file {path}" if path else "")
        if code == "RevisionNotFound" or (exc.code == 404 and code != "RepoNotFound" and not path):
            return HubError(f"{what}: the revision {revision!r} does not exist in {repo} on {self.endpoint}; set "
                            "the model's revision (target_revision / drafter_revision) to a commit, branch or tag "
                            "of the repository", "revision")
        if code == "GatedRepo" or exc.code == 403:
            auth = "the token was refused" if self.token else "no token was given"
            return HubError(f"{what}: the repository is gated on {self.endpoint} and {auth}; accept its license on "
                            "the Hub with your account, then set hf_token or hf_token_file (a token with read "
                            "access)", "gated")
        if exc.code in (401, 404):
            auth = "with the token given" if self.token else "without a token"
            return HubError(f"{what}: no such repository on {self.endpoint} ({exc.code} {auth}); check the id "
                            "(ORG/NAME, as on the Hub), or set hf_token / hf_token_file for a private or gated "
                            "one", "repo")
        return HubError(f"{what}: {self.endpoint} answered {exc.code} {ascii(str(exc.reason)[:80])}; try again later or check "
                        "hf_endpoint", "server")
