"""Compare copies of the project tree (e.g. before/after an engine change) on the benchmark workload.

Each tree's CLI (`python -m invoke play bench/workload/ours.yaml`, run in that tree) against the same
sshd hosts, repetitions interleaved across trees so that the machine's load hits them alike; wall
medians and CPU (the CLI process, and the kept-connection daemon when there is one; the hosts' side: the sshd
sessions and everything below them).

With --persist S the hosts' ssh options say `-o ControlMaster=auto -o ControlPersist=S` (`--persist no`: each run
its own connection); without it a tree keeps them as its default says. A tree that keeps them leaves a daemon,
whose CPU during each run is shown beside the CLI's.

Usage: python bench/compare.py TREE1,TREE2,... [--reps 5] [--hosts 1,8,16] [--persist 60]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.peers import ours_argv, workload_base  # noqa: E402
from bench.timing import compile_tree, daemon_cpu, own_cpu, stop_daemons, tree_cpu  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", help="comma-separated folders, each a copy of the project (tasks.py, engine/, library/)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--hosts", default="1,8,16")
    ap.add_argument("--first-octet", type=int, default=140)
    ap.add_argument("--persist", help="ControlPersist for the hosts (e.g. 60, or no)")
    args = ap.parse_args(argv)
    import pwd

    from tests.sshd_harness import SshdPool, write_inventory

    trees = [str(Path(t).resolve()) for t in args.trees.split(",")]
    for tree in trees:
        compile_tree(tree)
    sizes = [int(n) for n in args.hosts.split(",")]
    pool = SshdPool(count=max(sizes), first_octet=args.first_octet).start()
    listeners = [h.pid for h in pool.hosts]
    home = pwd.getpwnam(pool.hosts[0].user).pw_dir
    samples: dict = {}
    try:
        tmp = Path(tempfile.mkdtemp(prefix="dfp-compare-"))
        keep = {"ansible_ssh_common_args": f"-o ControlMaster=auto -o ControlPersist={args.persist}"}
        invs = {n: write_inventory(tmp / f"inv-{n}.yaml", pool.hosts[:n], vars=keep if args.persist else None)
                for n in sizes}

        def run(tree: str, n: int) -> tuple:
            argv = ours_argv(invs[n], home, "compare", n)
            host0, ctl0, daemon0, t0 = tree_cpu(listeners), own_cpu(True), daemon_cpu(), time.perf_counter()
            proc = subprocess.run(argv, cwd=tree, capture_output=True, text=True)
            wall, ctl, daemon = time.perf_counter() - t0, own_cpu(True) - ctl0, daemon_cpu() - daemon0
            time.sleep(0.2)
            if proc.returncode != 0:
                raise SystemExit(f"{tree}: exit {proc.returncode}\n{proc.stdout[-2000:]}")
            return wall, ctl, tree_cpu(listeners) - host0, daemon

        for tree in trees:  # warm-up: state on the hosts, runtime placed, bytecode compiled
            run(tree, max(sizes))
        for _ in range(args.reps):
            for tree in trees:
                for n in sizes:
                    samples.setdefault((tree, n), []).append(run(tree, n))
    finally:
        pool.stop()
        stop_daemons()
        import shutil

        shutil.rmtree(workload_base(home, "compare"), ignore_errors=True)
    for tree in trees:
        cells = []
        for n in sizes:
            rows = samples[(tree, n)]
            med = [statistics.median(r[i] for r in rows) for i in range(4)]
            kept = f" (+ daemon {med[3] * 1000:.0f})" if med[3] else ""
            cells.append(f"{n}: {med[0]:.3f} s (min {min(r[0] for r in rows):.3f}), cpu CLI {med[1] * 1000:.0f}{kept} "
                         f"+ hosts {med[2] * 1000:.0f} ms")
        print(f"{tree}\n    " + "\n    ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
