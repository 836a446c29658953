"""The kept-connection daemon's folder does not fill up: each daemon key (a code version and ssh agent: a new one
per login or upgrade) leaves a lock file, and a killed daemon its socket and pidfile. A daemon that starts removes
those of other keys once no daemon of theirs holds the lock, and nothing else. Real daemon processes, real
files."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from engine.connection import persist


def _dead_socket(path: Path) -> None:
    """A socket file nobody listens on, as a killed daemon leaves it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()


def _stop(path: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(path))
        sock.sendall(json.dumps({"stop": True}).encode() + b"\n")
        sock.recv(100)


def test_a_starting_daemon_removes_what_other_keys_left_and_keeps_what_is_in_use(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    ours, free, killed, serving = "a" * 16, "b" * 16, "c" * 16, "d" * 16
    for key in (free, killed, serving):
        (folder / f"{key}.lock").touch()
    _dead_socket(folder / f"{killed}.sock")
    (folder / f"{killed}.pid").write_text("999999")
    (folder / "notes.lock").touch()  # not a daemon key's: not the daemon's to remove
    held = os.open(folder / f"{serving}.lock", os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX)  # as a daemon of that key that serves
    try:
        persist._start_daemon(folder, ours)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any((folder / f"{k}.lock").exists() for k in (free, killed)):
            time.sleep(0.05)
        left = sorted(p.name for p in folder.iterdir())
        _stop(folder / f"{ours}.sock")
    finally:
        os.close(held)
    assert left == sorted([f"{ours}.lock", f"{ours}.pid", f"{ours}.sock", f"{serving}.lock", "notes.lock"]), left
