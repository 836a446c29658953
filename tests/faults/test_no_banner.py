"""A host that accepts TCP but never sends an SSH banner: one paragraph naming the address and the wait, no
paramiko traceback on the console."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_a_silent_tcp_listener_is_named_as_such(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    held: list = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])  # accepted, never answered
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump({"all": {"hosts": {"silent": {
        "ansible_host": "127.0.0.1", "ansible_port": port, "ansible_user": "nobody", "ansible_ssh_timeout": 2,
        "ansible_host_key_checking": False}}}}))
    (tmp_path / "pb.yaml").write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                                       "tasks": [{"name": "t", "command": {"argv": ["true"]}}]}]))
    try:
        proc = subprocess.run([sys.executable, "-m", "invoke", "play", str(tmp_path / "pb.yaml"), "-i", str(tmp_path / "inv.yaml")],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
    finally:
        stop.set()
        for conn in held:
            conn.close()
        server.close()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out
    assert f"no SSH banner from 127.0.0.1:{port} within 2 s" in out, out
    assert "Traceback" not in out and "No existing session" not in out, out
