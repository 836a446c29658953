"""HTTP under the Hub client (standard library only): an overall deadline per request, and where the token may go.

A socket timeout bounds each read, not a request: a server trickling one byte a second answers every read in
time and keeps a fetch running without end. Each request therefore has a `Deadline` (redirects, headers and
body included): when it passes, the request's sockets are shut down and the read in progress ends; the
client then says the answer did not arrive in time.

The Authorization header goes only to the origin (scheme, host and port) the request started at: a redirect
that changes any of the three (an https endpoint sending to http on the same host, another port, the Hub's
CDN) is followed without it, and it is not added back further on. Only http and https redirects are followed,
and a redirect's body is never read. Proxies from the environment (https_proxy...) work as with urllib.
"""

from __future__ import annotations

import http.client
import socket
import threading
import urllib.parse
import urllib.request
from typing import Any

DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple:
    """(scheme, host, port) of an address, the port made explicit: the token's reach."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:  # a port that is not a number: no origin the token may reach
        port = -1
    return scheme, (parts.hostname or "").lower(), port


def server_of(url: str) -> str:
    """The server an address reaches, as `scheme://host:port` (for messages that say who sent what)."""
    scheme, host, port = origin(url)
    return f"{scheme}://{host}:{port}"


class RedirectRefused(Exception):
    """A redirect to a scheme other than http(s); `msg` says where to."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.msg = msg


class Deadline:
    """The whole of one request must be over by `seconds`; past it, the sockets it opened are shut down."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._socks: list = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(seconds, 0.0), self._expire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.append(sock)
            if self.expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._socks:
                _shut(sock)

    def cancel(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._socks.clear()


def _shut(sock: socket.socket) -> None:
    """End the connection under a blocked read (the plain socket's shutdown: a TLS socket's own would reset its
    state under the reading thread)."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:  # already closed, or detached when TLS wrapped it
        pass


def _watched(base: Any, deadline: Deadline | None) -> Any:
    """A connection class whose sockets `deadline` can shut: the TCP one as made (a proxy's tunnel and the TLS
    handshake read from it), the TLS one once wrapped."""
    if deadline is None:
        return base

    def make(host: str, **kw: Any) -> http.client.HTTPConnection:
        conn = base(host, **kw)
        create, connect = conn._create_connection, conn.connect

        def created(*a: Any, **k: Any) -> socket.socket:
            sock = create(*a, **k)
            deadline.watch(sock)
            return sock

        def connected() -> None:
            connect()
            deadline.watch(conn.sock)

        conn._create_connection = created
        conn.connect = connected
        return conn

    return make


class _HTTP(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_watched(http.client.HTTPConnection, getattr(req, "dfp_deadline", None)), req)


class _HTTPS(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> Any:
        kwargs: dict = {"context": getattr(self, "_context", None)}
        if hasattr(self, "_check_hostname"):  # python < 3.12
            kwargs["check_hostname"] = self._check_hostname
        return self.do_open(_watched(http.client.HTTPSConnection, getattr(req, "dfp_deadline", None)), req, **kwargs)


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follow http(s) redirects under the request's deadline, the token only while the origin stays the same."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
        fp.close()  # a redirect's body is never read: an endless one would fill the memory
        scheme = urllib.parse.urlsplit(newurl).scheme.lower()
        if scheme not in DEFAULT_PORTS:
            raise RedirectRefused(f"{server_of(req.full_url)} redirected to {newurl[:120]!r}; only http and https "
                                  "redirects are followed")
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is None:
            return None
        new.dfp_deadline = getattr(req, "dfp_deadline", None)
        if origin(newurl) != origin(req.full_url):
            new.remove_header("Authorization")
        return new


def opener() -> urllib.request.OpenerDirector:
    """urllib's opener (proxies from the environment kept) with the deadline's connections and the redirect rule."""
    return urllib.request.build_opener(_HTTP(), _HTTPS(), _Redirects())


def open_request(opener_: urllib.request.OpenerDirector, req: urllib.request.Request, deadline: Deadline,
                 timeout: float) -> Any:
    """The response to `req`, every connection of it (redirects too) under `deadline`."""
    req.dfp_deadline = deadline  # type: ignore[attr-defined]
    return opener_.open(req, timeout=max(min(timeout, deadline.seconds), 0.001))

