"""A hostile Hugging Face-compatible server on loopback: the Hub's API of our own, with faults on demand.

olah (tests/fakes/hub.py) is a well-behaved mirror; this one is what a broken or hostile server does, for the
tests that prove the Hub client trusts no server (tests/security/test_hostile_hub.py) and for later ones.

`HostileHub()` serves repositories held in memory (`publish(repo_id, {name: bytes})` returns the commit) through
the three calls the tool makes (revision, paths-info, resolve with Range), over plain HTTP and, with a
certificate (`self_signed_cert`), TLS on the same port: a connection that starts with a TLS handshake gets TLS,
any other plain HTTP, so `https://127.0.0.1:P` and `http://127.0.0.1:P` are the same host and port and differ
only in scheme. Every request is recorded (`seen`: method, path, scheme, headers) before it is answered.

Faults, each until `heal()`:
- `oversize(name, extra=None, content_length=False)`: the file's bytes and then `extra` more (None: without end,
  until the client hangs up), with a Content-Length for the longer body when asked; `sent[name]` counts bytes;
- `trickle(kind, part)`: answer `kind` (revision, paths-info or resolve) one byte a second, the whole answer
  (`part="all"`: status line and headers too) or its body only;
- `misrange(name)`: answer a Range request for the file with a 206 of the whole file (`bytes 0-...`);
- `redirect(kind, to)`: answer `kind` with a 302 to the same path on `to` (another scheme, host or port),
  unless the request already came to `to` (the scheme and the Host header say where it came);
- `require_token(token)`: a gated repository (401 without, 403 with another token).
Names are served as published: control characters, 300-byte names, `a` beside `a/b`.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import json
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ENDLESS_CAP = 256 * 2**20  # an endless answer stops here even if the client never hangs up
KINDS = ("revision", "paths-info", "resolve")


@dataclass
class Seen:
    method: str
    path: str
    scheme: str
    headers: dict = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return kind_of(self.path)


def kind_of(path: str) -> str:
    parts = urllib.parse.urlsplit(path).path.split("/")
    if parts[1:3] == ["api", "models"] and len(parts) > 5:
        return parts[5]
    return "resolve" if len(parts) > 3 and parts[3] == "resolve" else "other"


def is_lfs(name: str) -> bool:
    return name.endswith((".safetensors", ".bin", ".pt"))


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def self_signed_cert(folder: Path) -> tuple[Path, Path]:
    """(cert.pem, key.pem) for 127.0.0.1 and localhost, made once per folder with `cryptography`."""
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hostile-hub")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class _Server(ThreadingHTTPServer):
    """Plain HTTP, or TLS when the connection opens with a handshake (same port)."""

    daemon_threads = True
    tls: ssl.SSLContext | None = None

    def finish_request(self, request, client_address):  # noqa: ANN001 - socketserver's signature
        request.settimeout(30)
        if self.tls is not None:
            try:
                first = request.recv(1, socket.MSG_PEEK)
                if first == b"\x16":  # a TLS ClientHello
                    request = self.tls.wrap_socket(request, server_side=True)
            except (OSError, ssl.SSLError):
                return
        super().finish_request(request, client_address)


class HostileHub:
    """The Hub's API on a free loopback port (`endpoint`; `https_endpoint` with a certificate), faults on demand."""

    def __init__(self, cert: tuple[Path, Path] | None = None, host: str = "127.0.0.1") -> None:
        self.repos: dict = {}  # repo_id -> {"commit": str, "files": {name: bytes}}
        self.seen: list[Seen] = []
        self.sent: dict = {}  # file name -> bytes written for it by the last answer
        self.heal()
        self.server = _Server((host, 0), self._handler())
        if cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(cert[0]), str(cert[1]))
            self.server.tls = ctx
        self.port = self.server.server_address[1]
        self.endpoint = f"http://{host}:{self.port}"
        self.https_endpoint = f"https://{host}:{self.port}" if cert else None
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------------ content and faults
    def publish(self, repo_id: str, files: dict) -> str:
        """Hold `files` (name -> bytes) as the repository's commit on main; the commit id."""
        listing = json.dumps(sorted((n, hashlib.sha256(d).hexdigest()) for n, d in files.items())).encode()
        commit = hashlib.sha1(repo_id.encode() + listing, usedforsecurity=False).hexdigest()
        self.repos[repo_id] = {"commit": commit, "files": dict(files)}
        return commit

    def heal(self) -> None:
        """A good server again: no fault left."""
        self.oversized: dict = {}  # name -> (extra bytes or None, content_length)
        self.trickled: dict = {}  # kind -> part ("all" or "body")
        self.redirected: dict = {}  # kind -> base URL
        self.token: str | None = None
        self.misranged: set = set()  # names answered from byte 0 whatever range was asked
        self.rate = 1.0  # bytes a second while trickling

    def oversize(self, name: str, extra: int | None = None, content_length: bool = False) -> None:
        self.oversized[name] = (extra, content_length)

    def misrange(self, name: str) -> None:
        self.misranged.add(name)

    def trickle(self, kind: str, part: str = "all", rate: float = 1.0) -> None:
        assert kind in KINDS and part in ("all", "body")
        self.trickled[kind], self.rate = part, rate

    def redirect(self, kind: str, to: str) -> None:
        assert kind in KINDS
        self.redirected[kind] = to.rstrip("/")

    def require_token(self, token: str) -> None:
        self.token = token

    def auth_seen(self, kind: str | None = None) -> list:
        """The Authorization header of each request (of one kind), None where none came."""
        return [s.headers.get("Authorization") for s in self.seen if kind is None or s.kind == kind]

    # ------------------------------------------------------------------ answers
    def _answer(self, h: BaseHTTPRequestHandler, scheme: str, body: bytes | None) -> tuple:
        """(status, headers, body bytes or an iterator of chunks) for one request."""
        kind = kind_of(h.path)
        target = self.redirected.get(kind)
        if target and urllib.parse.urlsplit(target)[:2] != (scheme, h.headers.get("Host")):  # not there yet
            return 302, {"Location": target + h.path}, b""
        if self.token and h.headers.get("Authorization") != f"Bearer {self.token}":
            return (403 if h.headers.get("Authorization") else 401), {"X-Error-Code": "GatedRepo"}, b""
        parts = urllib.parse.urlsplit(h.path).path.split("/")
        if kind == "revision":
            return self._revision("/".join(parts[3:5]))
        if kind == "paths-info":
            return self._paths_info("/".join(parts[3:5]), body or b"")
        if kind == "resolve":
            name = urllib.parse.unquote("/".join(parts[5:]))
            return self._resolve("/".join(parts[1:3]), name, h.headers.get("Range") or "")
        return 404, {"X-Error-Code": "RepoNotFound"}, b""

    def _revision(self, repo_id: str) -> tuple:
        repo = self.repos.get(repo_id)
        if repo is None:
            return 404, {"X-Error-Code": "RepoNotFound"}, b""
        siblings = [{"rfilename": n} for n in repo["files"]]
        return 200, {"Content-Type": "application/json"}, json.dumps({"sha": repo["commit"], "siblings": siblings}).encode()

    def _paths_info(self, repo_id: str, body: bytes) -> tuple:
        repo = self.repos.get(repo_id)
        if repo is None:
            return 404, {"X-Error-Code": "RepoNotFound"}, b""
        asked = urllib.parse.parse_qs(body.decode(), keep_blank_values=True).get("paths", [])
        out = []
        for name in asked:
            data = repo["files"].get(name)
            if data is None:
                continue
            entry = {"type": "file", "path": name, "size": len(data), "oid": git_blob_id(data)}
            if is_lfs(name):
                entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data)}
            out.append(entry)
        return 200, {"Content-Type": "application/json"}, json.dumps(out).encode()

    def _resolve(self, repo_id: str, name: str, ranged: str) -> tuple:
        data = (self.repos.get(repo_id) or {"files": {}})["files"].get(name)
        if data is None:
            return 404, {"X-Error-Code": "EntryNotFound"}, b""
        if name in self.oversized:
            extra, with_length = self.oversized[name]
            headers = {"Content-Length": str(len(data) + extra)} if with_length and extra is not None else {}
            return 200, headers, self._longer(name, data, extra)
        start = int(ranged[6:-1]) if ranged.startswith("bytes=") and ranged.endswith("-") else 0
        if start and name in self.misranged:  # a 206 that says (truthfully) it starts elsewhere than asked
            return 206, {"Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}"}, data
        if start:
            return 206, {"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"}, data[start:]
        return 200, {}, data

    def _longer(self, name: str, data: bytes, extra: int | None):
        """The file's bytes, then `extra` more (None: until the client hangs up), counted in sent[name]."""
        self.sent[name] = 0
        chunks = [data] + ([b"X" * extra] if extra else [])
        for chunk in chunks:
            self.sent[name] += len(chunk)
            yield chunk
        while extra is None and self.sent[name] < ENDLESS_CAP:
            self.sent[name] += 65536
            yield b"X" * 65536

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one answer per connection; a body without length ends at the close

            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                self._serve(None)

            def do_POST(self):
                self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            def _serve(self, body):
                scheme = "https" if isinstance(self.connection, ssl.SSLSocket) else "http"
                hub.seen.append(Seen(self.command, self.path, scheme, dict(self.headers.items())))
                status, headers, payload = hub._answer(self, scheme, body)
                if isinstance(payload, bytes):
                    headers = {"Content-Length": str(len(payload)), **headers}
                head = [f"HTTP/1.0 {status} {self.responses.get(status, ('',))[0]}\r\n"]
                head += [f"{k}: {v}\r\n" for k, v in headers.items()] + ["Connection: close\r\n", "\r\n"]
                part = hub.trickled.get(kind_of(self.path))
                try:
                    self._send("".join(head).encode(), part == "all")
                    for chunk in [payload] if isinstance(payload, bytes) else payload:
                        self._send(chunk, part is not None)
                except OSError:  # the client hung up: what a hostile answer is for
                    pass
                self.close_connection = True

            def _send(self, data: bytes, slowly: bool) -> None:
                if not slowly:
                    self.wfile.write(data)
                    return
                for i in range(len(data)):
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
                    time.sleep(1.0 / hub.rate)

        return Handler
