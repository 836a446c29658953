"""A real package index (PEP 503 "simple" pages over HTTP) serving the wheels of a folder, whose wheel
downloads wait until the test releases them: a slow network, on demand, for installers (pip, uv).

    index = SlowIndex(wheel_dir).start()
    ... index_url=index.url ...        # installs from it
    index.asked.wait(60)               # an installer is now blocked downloading a wheel
    index.release.set()                # downloads go through from now on
    index.stop()
"""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class SlowIndex(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, wheel_dir: str | Path, stall_s: float = 120.0) -> None:
        self.wheels = {p.name: p for p in Path(wheel_dir).glob("*.whl")}
        self.asked = threading.Event()  # a wheel download was requested
        self.release = threading.Event()  # let downloads through
        self.stall_s = stall_s
        super().__init__(("127.0.0.1", 0), _handler(self))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/simple"

    def projects(self) -> dict:
        out: dict = {}
        for name in sorted(self.wheels):
            out.setdefault(normalize(name.split("-")[0]), []).append(name)
        return out

    def start(self) -> SlowIndex:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


def _handler(index: SlowIndex):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _send(self, code: int, body: bytes, ctype: str = "text/html") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            parts = [p for p in self.path.split("?")[0].split("/") if p]
            if parts == ["simple"]:
                links = "".join(f'<a href="/simple/{p}/">{p}</a>' for p in index.projects())
                self._send(200, f"<html><body>{links}</body></html>".encode())
            elif len(parts) == 2 and parts[0] == "simple":
                files = index.projects().get(normalize(parts[1]))
                if not files:
                    self._send(404, b"not found")
                    return
                links = "".join(f'<a href="/files/{f}">{f}</a>' for f in files)
                self._send(200, f"<html><body>{links}</body></html>".encode())
            elif len(parts) == 2 and parts[0] == "files" and parts[1] in index.wheels:
                index.asked.set()
                index.release.wait(index.stall_s)
                self._send(200, index.wheels[parts[1]].read_bytes(), "application/octet-stream")
            else:
                self._send(404, b"not found")

    return Handler
