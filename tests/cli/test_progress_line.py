"""The live line of a long task, as a person sees it in a terminal of 80 or 100 columns: the real `invoke play`
in a pseudo-terminal of that width. The seconds and the task's last note come first; the task's name, already
shown in its TASK banner, is what the width cuts (before, a long name filled the line and hid both, so a long
build looked frozen)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest
import yaml

from tests.cli.helpers import ROOT
from tests.fakes.vllm_processes import free_port

LONG_NAME = ("Wait for a port nobody opens, under a task name as long as the environment build's own name, which "
             "alone fills a terminal of 100 columns")


def run_in_terminal(argv: list[str], columns: int, timeout: float = 120) -> tuple[int, str]:
    """Run `argv` with a pseudo-terminal of `columns` columns as its stdin, stdout and stderr; (exit code, output)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}  # the terminal's size decides
    proc = subprocess.Popen(argv, cwd=ROOT, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every holder of the terminal's other end has closed it
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=timeout), b"".join(chunks).decode("utf-8", "replace")


def live_lines(output: str) -> list[str]:
    """Each state of the live line: what follows a `\\r ESC[K` up to the next carriage return or newline."""
    return [re.split(r"[\r\n]", part, maxsplit=1)[0] for part in output.split("\r\x1b[K")[1:]
            if part.startswith("  ...")]


@pytest.mark.parametrize("columns", [80, 100])
def test_the_live_line_shows_seconds_and_note_first_and_cuts_the_task_name(tmp_path, columns):
    play = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": LONG_NAME, "wait_for": {"host": "127.0.0.1", "port": free_port(), "timeout": 7},
         "ignore_errors": True}]}]
    pb, inv = tmp_path / "pb.yaml", tmp_path / "inv.yaml"
    pb.write_text(yaml.safe_dump(play, sort_keys=False))
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"local": {"ansible_connection": "local"}}}}))
    code, out = run_in_terminal([sys.executable, "-m", "invoke", "play", str(pb), "-i", str(inv)], columns)
    assert code == 0, out
    lines = live_lines(out)
    assert lines, f"no live line was drawn:\n{out!r}"
    for line in lines:
        assert len(line) <= columns - 1, line
        assert re.match(r"  \.\.\. \d+s on local", line), line  # the seconds first, never cut
    noted = [line for line in lines if "waiting for" in line]
    assert noted, f"the task's note never showed:\n{lines}"
    assert all(re.match(r"  \.\.\. \d+s on local: waiting for ", line) for line in noted), noted
    assert not any(LONG_NAME in line for line in lines), "the whole name fits in no such terminal: it is what is cut"
