"""One HTTP(S), FTP or file: download into a temporary file, for get_url (and unarchive's remote URLs).

urllib from the standard library; the socket timeout bounds every connect and every read (a server that stops
sending mid-body fails after `timeout` seconds, never hangs), and a whole download is bounded by DEADLINE_S.
The answer is Ansible's fetch_url info in its words: status (-1: no answer), msg ("OK (N bytes)", "HTTP Error
404: Not Found", "Request failed: ..."), the response headers lower-cased, url (after redirects). Credentials
go in an Authorization header built here; they are never part of a returned message (mask_url hides a URL's
user-info). Standard library only.
"""

from __future__ import annotations

import base64
import datetime
import email.utils
import http.client
import os
import socket
import ssl
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from dflash_host.module import ModuleError

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any

DEADLINE_S = 6 * 3600.0  # a whole download, however slow the reads that each beat the timeout
CHUNK = 1 << 20
SCHEMES = ("http", "https", "ftp", "file")


def mask_url(url: str) -> str:
    """The URL with its user-info masked as Ansible's mask_url (`****:****@`, `****@`)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    userinfo, host = parts.netloc.rsplit("@", 1)
    masked = "****:****" if ":" in userinfo else "****"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{masked}@{host}"))


def split_credentials(url: str, user: str | None, password: str | None) -> tuple[str, str | None, str | None]:
    """(url without user-info, user, password): the task's url_username wins over the URL's own user-info."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, user, password
    userinfo, host = parts.netloc.rsplit("@", 1)
    name, _, secret = userinfo.partition(":")
    bare = urllib.parse.urlunsplit(parts._replace(netloc=host))
    if user:
        return bare, user, password
    return bare, urllib.parse.unquote(name), urllib.parse.unquote(secret)


def _opener(url: str, user: str | None, password: str | None, opts: dict, headers: dict) -> urllib.request.OpenerDirector:
    handlers: list = []
    if user and opts.get("force_basic_auth"):
        token = base64.b64encode(f"{user}:{password or ''}".encode()).decode("ascii")
        headers["Authorization"] = f"Basic {token}"
    elif user:
        manager = urllib.request.HTTPPasswordMgrWithDefaultRealm()
        manager.add_password(None, urllib.parse.urlsplit(url).netloc, user, password or "")
        handlers += [urllib.request.HTTPBasicAuthHandler(manager), urllib.request.HTTPDigestAuthHandler(manager)]
    if not opts.get("use_proxy", True):
        handlers.append(urllib.request.ProxyHandler({}))
    context = ssl.create_default_context()
    if not opts.get("validate_certs", True):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


def _request(url: str, method: str, opts: dict, last_mod_time: float | None, headers: dict) -> urllib.request.Request:
    req = urllib.request.Request(url, method=method)  # noqa: S310 - the scheme is checked by fetch
    if opts.get("http_agent"):
        req.add_header("User-agent", opts["http_agent"])
    if opts.get("force"):
        req.add_header("cache-control", "no-cache")
    elif last_mod_time is not None:  # as Ansible's fetch_url: the server may answer 304 Not Modified
        stamp = datetime.datetime.fromtimestamp(last_mod_time, datetime.timezone.utc)
        req.add_header("If-Modified-Since", email.utils.format_datetime(stamp, usegmt=True))
    unredirected = {str(h).lower() for h in opts.get("unredirected_headers") or []}
    for name, value in headers.items():
        (req.add_unredirected_header if name.lower() in unredirected else req.add_header)(name, str(value))
    return req


def _copy_body(resp: Any, folder: str | None, deadline: float) -> str:
    """The body in a new temporary file in `folder` (none: the temp folder); a ModuleError when reading fails."""
    fd, path = tempfile.mkstemp(dir=folder, prefix=".dfp-get_url-")
    try:
        with os.fdopen(fd, "wb") as fh:
            while True:
                if time.monotonic() > deadline:
                    raise ModuleError(f"the download took longer than {DEADLINE_S:g} s; stopped")
                chunk = resp.read(CHUNK)
                if not chunk:
                    break
                fh.write(chunk)
    except (OSError, http.client.HTTPException, ModuleError) as exc:
        os.unlink(path)
        why = exc.msg if isinstance(exc, ModuleError) else (str(exc) or type(exc).__name__)
        raise ModuleError(f"failed to create temporary content file: {why}") from None
    return path


def fetch(url: str, opts: dict, method: str = "GET", last_mod_time: float | None = None,
          folder: str | None = None) -> tuple[str | None, dict]:
    """(temporary file holding the body or None, info): the request made with opts (timeout, headers,
    url_username, url_password, force_basic_auth, validate_certs, use_proxy, http_agent, force,
    unredirected_headers); info as Ansible's fetch_url. No file when no 2xx answer came."""
    if urllib.parse.urlsplit(url).scheme not in SCHEMES:
        return None, {"status": -1, "url": mask_url(url),
                      "msg": f"Request failed: <urlopen error unknown url type: {urllib.parse.urlsplit(url).scheme}>"}
    bare, user, password = split_credentials(url, opts.get("url_username"), opts.get("url_password"))
    headers = dict(opts.get("headers") or {})
    info: dict = {"url": mask_url(url), "status": -1}
    try:
        resp = _opener(bare, user, password, opts, headers).open(
            _request(bare, method, opts, last_mod_time, headers), timeout=opts.get("timeout") or 10)
    except urllib.error.HTTPError as exc:
        info.update({k.lower(): v for k, v in (exc.headers or {}).items()})
        info.update(msg=str(exc), status=exc.code)
        exc.close()
        return None, info
    except urllib.error.URLError as exc:
        info["msg"] = f"Request failed: {exc}"
        return None, info
    except socket.timeout as exc:
        info["msg"] = f"Connection failure: {exc or 'timed out'}"
        return None, info
    except http.client.BadStatusLine as exc:
        info["msg"] = f"Connection failure: connection was closed before a valid response was received: {getattr(exc, 'line', exc)}"
        return None, info
    except (OSError, http.client.HTTPException, ValueError) as exc:
        info["msg"] = f"Connection failure: {exc}"
        return None, info
    with resp:
        info.update({k.lower(): v for k, v in resp.headers.items()})
        status = getattr(resp, "status", None) or 200  # file: and ftp: answers carry no status: Ansible's 200
        info.update(msg=f"OK ({resp.headers.get('Content-Length', 'unknown')} bytes)", url=mask_url(resp.geturl()),
                    status=status)
        path = _copy_body(resp, folder, time.monotonic() + DEADLINE_S)
    return path, info
