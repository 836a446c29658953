"""Talk to a vLLM server over HTTP (/health, /v1/models, /v1/completions, /metrics) and find who holds a port.

HTTP goes straight to the server (proxies from the environment are ignored: the server is on this
host). Standard library + psutil; used by the parts (ready, start, status, node) and, through the front, serving_bench.
"""

from __future__ import annotations

import errno
import json
import socket
import urllib.error
import urllib.request

import psutil

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class HttpResult:
    def __init__(self, status: int | None, body: bytes = b"", error: str = "") -> None:
        self.status, self.body, self.error = status, body, error

    def json(self):
        try:
            return json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None

    def describe(self) -> str:
        if self.status is None:
            return self.error or "no answer"
        text = self.body[:300].decode("utf-8", "replace").strip()
        return f"HTTP {self.status}" + (f": {text}" if text else "")


def probe_host(host: str) -> str:
    """Where to connect to reach a server listening on `host` (a wildcard means loopback)."""
    if host in ("", "0.0.0.0"):  # noqa: S104 - recognises the wildcard a server binds to; binds nothing
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def base_url(host: str, port: int) -> str:
    h = probe_host(host)
    return f"http://[{h}]:{port}" if ":" in h else f"http://{h}:{port}"


def endpoint(launch: dict) -> dict | None:
    """Where a client reaches the server and by which name (what `invoke provision` and `invoke status` print, so
    that the first thing a person does next needs no guessing); None for a headless node, which serves no API."""
    host, port = launch.get("host"), launch.get("port")
    if host is None or port is None:
        return None
    return {"listen": f"[{host}]:{port}" if ":" in host else f"{host}:{port}", "url": base_url(host, port) + "/v1",
            "served_model_name": launch.get("served_model_name"), "api_key_set": bool(launch.get("api_key_set"))}


def request(url: str, data: dict | None = None, timeout: float = 2.0, api_key: str | None = None) -> HttpResult:
    headers = {"Accept": "application/json"}
    body = None
    if data is not None:
        body = json.dumps(data).encode()
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url, data=body, headers=headers, method="POST" if body else "GET")  # noqa: S310 - base_url() builds http:// only
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return HttpResult(resp.status, resp.read())
    except urllib.error.HTTPError as exc:
        try:
            payload = exc.read()
        except OSError:
            payload = b""
        return HttpResult(exc.code, payload)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, OSError) and reason.strerror:
            return HttpResult(None, error=reason.strerror.lower())
        return HttpResult(None, error=str(reason) or type(reason).__name__)


def served_models(result: HttpResult) -> list:
    data = result.json()
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        return []
    return [m.get("id") for m in data["data"] if isinstance(m, dict)]


def completion_tokens(result: HttpResult) -> tuple:
    """(number of generated tokens, text) of a /v1/completions answer; (0, reason) if none."""
    data = result.json()
    if result.status != 200 or not isinstance(data, dict):
        return 0, result.describe()
    usage = data.get("usage") or {}
    choices = data.get("choices") or []
    text = choices[0].get("text", "") if choices and isinstance(choices[0], dict) else ""
    tokens = usage.get("completion_tokens")
    if not isinstance(tokens, int):
        tokens = len(text.split()) if text else 0
    return tokens, text


# --------------------------------------------------------------------------- ports


def port_in_use(host: str, port: int) -> bool:
    """Would a server fail to listen on host:port? (bind with SO_REUSEADDR, as uvicorn does)."""
    h = probe_host(host) if host not in ("", "0.0.0.0", "::") else host  # noqa: S104 - tests the address the server will bind
    family = socket.AF_INET6 if ":" in h else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((h, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def port_listeners(port: int) -> list:
    """Processes listening on `port` (any address): [{pid, name, user, cmdline}]; pid None if hidden."""
    out = []
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return [{"pid": None, "name": None, "user": None, "cmdline": []}]
    seen = set()
    for c in conns:
        if c.status != psutil.CONN_LISTEN or not c.laddr or c.laddr.port != port or c.pid in seen:
            continue
        seen.add(c.pid)
        info = {"pid": c.pid, "name": None, "user": None, "cmdline": []}
        if c.pid:
            try:
                p = psutil.Process(c.pid)
                with p.oneshot():
                    info.update(name=p.name(), user=p.username(), cmdline=p.cmdline())
            except psutil.Error:
                pass
        out.append(info)
    return out


def describe_owner(info: dict) -> str:
    if not info.get("pid"):
        return "a process this user cannot see (another user's; `sudo ss -ltnp` names it)"
    cmd = " ".join(info.get("cmdline") or []) or info.get("name") or "?"
    if len(cmd) > 200:
        cmd = cmd[:197] + "..."
    return f"PID {info['pid']} ({cmd}, user {info.get('user') or '?'})"
