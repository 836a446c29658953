"""The Hugging Face Hub's HTTP API, as far as fetching a model repository needs it (standard library only).

Three calls, all answered alike by the Hub and by HF-compatible mirrors (olah, hf-mirror, proxies):
`revision` (GET /api/models/ID/revision/REV: the commit a revision names and the repository's file
names), `paths_info` (POST /api/models/ID/paths-info/COMMIT: each file's size, git blob id and, for LFS
files, sha256) and `open_file` (GET /ID/resolve/COMMIT/PATH, from an offset when the server honours
Range). model_info (/api/models/ID) is not used: mirrors in offline mode refuse it.

The token goes only into the Authorization header of requests to the endpoint's own host; a redirect to
another host (the Hub's CDN for LFS files) is followed without it. Errors are HubError with a message
that names the repository, the revision and the fix.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

USER_AGENT = "dflash-provision (stdlib urllib)"
PATHS_PER_REQUEST = 100  # paths-info takes the paths as form fields; keep each request small
MAX_METADATA_BYTES = 32 * 2**20  # a repository's metadata is KB to a few MB


class HubError(Exception):
    """A Hub request that failed; `kind` is repo, revision, auth, gated, network or server."""

    def __init__(self, msg: str, kind: str) -> None:
        super().__init__(msg)
        self.msg = msg
        self.kind = kind


class _SameHostAuthRedirect(urllib.request.HTTPRedirectHandler):
    """Follow redirects, dropping the Authorization header when the redirect leaves the endpoint's host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


class HubClient:
    """Requests to one endpoint (the Hub or a mirror) for model repositories, with an optional token."""

    def __init__(self, endpoint: str, token: str | None = None, timeout: float = 60.0) -> None:
        parts = urllib.parse.urlsplit(str(endpoint))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise HubError(f"hf_endpoint {endpoint!r} is not an http(s) address; set it to the Hub "
                           "(https://huggingface.co) or a mirror's address, e.g. http://mirror.lan:8090", "config")
        self.endpoint = endpoint.rstrip("/")
        self.token = token or None
        self.timeout = timeout
        self._opener = urllib.request.build_opener(_SameHostAuthRedirect())

    def _request(self, url: str, data: bytes | None = None, headers: dict | None = None):
        # noqa below: the endpoint's scheme is checked to be http(s) in __init__
        req = urllib.request.Request(url, data=data, headers={"User-Agent": USER_AGENT, **(headers or {})})  # noqa: S310
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        return self._opener.open(req, timeout=self.timeout)

    def _json(self, url: str, what: str, repo: str, revision: str, data: bytes | None = None):
        try:
            with self._request(url, data=data, headers={"Accept": "application/json"}) as resp:
                body = resp.read(MAX_METADATA_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc, repo, revision) from None
        except (urllib.error.URLError, OSError) as exc:
            raise self._network_error(exc) from None
        if len(body) > MAX_METADATA_BYTES:
            raise HubError(f"{self.endpoint}: the {what} of {repo} is larger than {MAX_METADATA_BYTES >> 20} MiB", "server")
        try:
            return json.loads(body)
        except ValueError:
            raise HubError(f"{self.endpoint}: the {what} of {repo}@{revision} is not JSON; is hf_endpoint a Hub "
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

    def open_file(self, repo: str, commit: str, path: str, offset: int = 0):
        """The response for a file's bytes from `offset`; its status is 206 when the server resumed there."""
        url = f"{self.endpoint}/{repo}/resolve/{commit}/{urllib.parse.quote(path)}"
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        try:
            return self._request(url, headers=headers)
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and offset:  # the partial file is already whole (or longer): start again
                return self.open_file(repo, commit, path, 0)
            raise self._http_error(exc, repo, commit, path) from None
        except (urllib.error.URLError, OSError) as exc:
            raise self._network_error(exc) from None

    def _network_error(self, exc: Exception) -> HubError:
        reason = getattr(exc, "reason", exc)
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
        return HubError(f"{what}: {self.endpoint} answered {exc.code} {exc.reason}; try again later or check "
                        "hf_endpoint", "server")
