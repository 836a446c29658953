"""A Hugging Face Hub on loopback for the models tests: real olah (offline mode, local git repositories),
and a gate in front of it for what olah cannot show on demand.

`LocalHub.publish(repo_id, files)` commits files to `MIRRORS/models/ORG/NAME` (a git repository on branch
main, as olah wants) and returns the commit; olah serves it through the Hub's API. `served(repo_id, name)`
counts olah's access-log lines for a file's download, i.e. how often the upstream served it.

`Gate` is an HTTP server between the client and olah: it can require a token (a gated repository: olah
cannot enforce one), honour Range (olah answers 200 with the whole file), slow a download down (to kill
a fetch in the middle) and it records the Authorization headers it saw.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.fakes.vllm_processes import free_port

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


FAKES = Path(__file__).resolve().parent
OLAH_VENV = Path(os.environ.get("DFP_E2E_ROOT", "/tmp/dfp-e2e")) / "olah-venv"


def olah_cli() -> str | None:
    """olah-cli beside this python, in the tests' own olah venv, or on PATH."""
    if (Path(sys.executable).parent / "olah-cli").exists():
        return str(Path(sys.executable).parent / "olah-cli")
    if (OLAH_VENV / "installed").exists():  # written once pip finished: a half-built venv is not used
        return str(OLAH_VENV / "bin" / "olah-cli")
    return shutil.which("olah-cli")


def ensure_olah() -> str:
    """olah-cli, installing olah into a venv of its own first when there is none (about 20 s, once per machine).

    olah's dependencies (fastapi-utils pins psutil<6) must not decide the versions the tool itself runs on,
    so it never shares the tests' environment: tests/fakes/olah-constraints.txt pins its own set.
    """
    found = olah_cli()
    if found:
        return found
    shutil.rmtree(OLAH_VENV, ignore_errors=True)  # built in place: a venv's scripts name its own path
    subprocess.run([sys.executable, "-m", "venv", str(OLAH_VENV)], check=True)
    subprocess.run([str(OLAH_VENV / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "-r", str(FAKES / "olah-requirements.txt"), "-c", str(FAKES / "olah-constraints.txt")], check=True)
    (OLAH_VENV / "installed").write_text("olah, pinned by tests/fakes/olah-constraints.txt\n")
    return str(OLAH_VENV / "bin" / "olah-cli")


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


class LocalHub:
    """olah in offline mode over a folder of git repositories, on a free loopback port."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mirrors = root / "mirrors"
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "olah.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> LocalHub:
        (self.mirrors / "models").mkdir(parents=True, exist_ok=True)
        config = self.root / "olah.toml"
        config.write_text(
            f'[basic]\nhost = "127.0.0.1"\nport = {self.port}\nrepos-path = "{self.root / "olah-cache"}"\n'
            f'mirror-scheme = "http"\nmirror-netloc = "127.0.0.1:{self.port}"\n'
            f'mirror-lfs-netloc = "127.0.0.1:{self.port}"\nmirrors-path = ["{self.mirrors}"]\n'
            "[accessibility]\noffline = true\n"
        )
        cli = ensure_olah()
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - open while olah runs
        self.proc = subprocess.Popen([cli, "-c", str(config)], stdout=self.log, stderr=subprocess.STDOUT, cwd=self.root)
        wait_port(self.port)
        return self

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.log.close()

    def repo_path(self, repo_id: str) -> Path:
        return self.mirrors / "models" / repo_id

    def publish(self, repo_id: str, files: dict, message: str = "publish") -> str:
        """Write files (name -> bytes, or None to delete) into the repository, commit on main, return the commit."""
        repo = self.repo_path(repo_id)
        env = dict(os.environ, **GIT_ENV)
        if not (repo / ".git").exists():
            repo.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
        for name, data in files.items():
            path = repo / name
            if data is None:
                path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=env)
        subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", message], check=True, env=env)
        return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, env=env,
                              capture_output=True, text=True).stdout.strip()

    def publish_folder(self, repo_id: str, folder: Path) -> str:
        files = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
        return self.publish(repo_id, files)

    def served(self, repo_id: str, name: str | None = None) -> int:
        """How many downloads of the repository's files (of one file, with name) olah answered."""
        text = self.log_path.read_text(errors="replace")
        pattern = rf'"GET /{re.escape(repo_id)}/resolve/[^/ ]+/{re.escape(name) if name else "[^ ]+"} HTTP'
        return len(re.findall(pattern, text))


class Gate:
    """An HTTP server in front of an upstream Hub: token check, Range, throttling, a record of what it saw."""

    def __init__(self, upstream: str, token: str | None = None, rate: float | None = None) -> None:
        self.upstream, self.token, self.rate = upstream.rstrip("/"), token, rate
        self.auth_seen: list = []
        self.paths: list = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                self._serve(None)

            def do_HEAD(self):
                self._serve(None)

            def do_POST(self):
                self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            def _serve(self, body):
                gate.auth_seen.append(self.headers.get("Authorization"))
                gate.paths.append(self.path)
                if gate.token and self.headers.get("Authorization") != f"Bearer {gate.token}":
                    self.send_response(401 if not self.headers.get("Authorization") else 403)
                    self.send_header("X-Error-Code", "GatedRepo")
                    self.end_headers()
                    return
                req = urllib.request.Request(gate.upstream + self.path, data=body, method=self.command)  # noqa: S310 - loopback
                for key in ("Content-Type", "Accept"):
                    if self.headers.get(key):
                        req.add_header(key, self.headers[key])
                try:
                    with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 - loopback upstream
                        status, headers, data = resp.status, dict(resp.headers), resp.read()
                except urllib.error.HTTPError as exc:
                    status, headers, data = exc.code, dict(exc.headers), exc.read()
                start = 0
                ranged = re.match(r"bytes=(\d+)-$", self.headers.get("Range") or "")
                if ranged and status == 200 and "/resolve/" in self.path:
                    start = int(ranged.group(1))
                    status = 206
                self.send_response(status)
                for key, value in headers.items():
                    if key.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                        self.send_header(key, value)
                part = data[start:]
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Content-Length", str(len(part)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                self._write(part)

            def _write(self, part: bytes):
                if not gate.rate:
                    self.wfile.write(part)
                    return
                step = max(int(gate.rate / 20), 1)
                for i in range(0, len(part), step):
                    self.wfile.write(part[i:i + step])
                    self.wfile.flush()
                    time.sleep(0.05)

        return Handler


FETCH = "Fetch and verify the Hub models (target and drafter) into the tool's Hugging Face cache"  # the models role's task
