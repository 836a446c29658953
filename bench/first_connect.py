"""How long the CLI takes from its spawn to its first TCP connection to a host, and its CPU by then.

A listener on 127.0.0.250 stands in for the host (it accepts and closes: the run then fails, which does not
matter); the CLI of TREE (`python -m invoke play bench/workload/ours.yaml` run in that tree) is spawned N times.
This is the start-up a lazy CLI shortens (issue #12). Usage: python bench/first_connect.py [TREE] [--reps 7]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def once(tree: str, inventory: Path, srv: socket.socket) -> tuple[float, float]:
    argv = [sys.executable, "-m", "invoke", "play", str(Path(tree) / "bench" / "workload" / "ours.yaml"),
            "-i", str(inventory), "-e", "base=/tmp/dfp-first-connect"]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    conn, _ = srv.accept()
    wall = time.perf_counter() - started
    cpu = cpu_s(proc.pid)
    conn.close()
    proc.wait(timeout=60)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tree", nargs="?", default=str(ROOT))
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args(argv)
    with socket.socket() as srv, tempfile.TemporaryDirectory() as tmp:
        srv.bind(("127.0.0.250", 0))
        srv.listen(5)
        srv.settimeout(60)
        inventory = Path(tmp) / "inventory.yaml"
        inventory.write_text(
            "all:\n  hosts:\n    h1:\n      ansible_host: 127.0.0.250\n"
            f"      ansible_port: {srv.getsockname()[1]}\n      ansible_host_key_checking: false\n"
            "      dfp_connect_retries: 1\n      ansible_ssh_timeout: 1\n"
        )
        runs = [once(args.tree, inventory, srv) for _ in range(args.reps)]
    walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
    print(f"{args.tree}: first connection {min(walls) * 1000:.0f} / {statistics.median(walls) * 1000:.0f} ms "
          f"(min / median of {len(runs)}), the CLI's CPU by then {statistics.median(cpus) * 1000:.0f} ms (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
