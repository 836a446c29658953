"""The CLI as a person runs it: `python3 -m invoke ...` from the repository root, as a real process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args: str, cwd: Path = ROOT, env: dict | None = None, timeout: float = 120) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)
    return proc.returncode, proc.stdout + proc.stderr


def write_play(tmp_path: Path, tasks: list, inventory: dict | None = None) -> tuple[Path, Path, Path]:
    """A playbook whose first task would create a folder (the marker: a refused run must not create it),
    then `tasks`; and an inventory of the local host. Returns (playbook, inventory, marker)."""
    marker = tmp_path / "changed-marker"
    first = {"name": "Would change the host", "file": {"path": str(marker), "state": "directory"}, "tags": ["mark"]}
    pb = tmp_path / "pb.yaml"
    pb.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [first, *tasks]}], sort_keys=False))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(inventory or {"all": {"hosts": {"local": {"ansible_connection": "local"}}}}))
    return pb, inv, marker


def assert_refused(code: int, out: str, marker: Path | None, *needles: str) -> None:
    """Exit 4, one clear message, no traceback, nothing changed."""
    assert code == 4, out
    assert "Traceback" not in out, out
    for n in needles:
        assert n in out, f"{n!r} not in:\n{out}"
    assert marker is None or not marker.exists(), "a refused run must change nothing"
