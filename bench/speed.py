"""How far apart two identical speed verdicts are: `invoke serving-bench --compare-baseline --repeat 2` on the
local host (the benchmark's cold-provisioned root, while its server is up), random tokens at concurrency 1 and
4, three repetitions per level in turns. The figure: the largest ratio between the two rounds' speed-ups of a
level (1.0 = the same), and whether the two rounds' intervals overlap at every level.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOAD = {"speed_workload": "random", "speed_min_seconds": 5, "speed_requests": 8, "speed_max_tokens": 32}


def repeatability(extra_vars: dict, out: Path, log=print) -> tuple:
    """(largest ratio between the rounds' speed-ups or None, details, reason when None)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    evars = [a for k, v in {**extra_vars, **LOAD}.items() for a in ("-e", f"{k}={json.dumps(v)}")]
    argv = [sys.executable, "-m", "invoke", "serving-bench", "--host", "local", *evars, "--compare-baseline",
            "--repeat", "2", "--concurrency", "1,4", "--repetitions", "3", "--json", str(out), "--html", str(out.parent)]
    log("serving-bench --compare-baseline --repeat 2 on the cold root (random tokens, concurrency 1 and 4)")
    proc = subprocess.run(argv, cwd=str(ROOT), capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0 or not out.is_file():
        return None, {"rc": proc.returncode, "tail": proc.stdout[-800:] + proc.stderr[-800:]}, "serving-bench failed"
    data = json.loads(out.read_text())
    rounds = [r.get("comparison") or {} for r in data.get("repeats") or []]
    apart, overlap, per_level = 1.0, True, {}
    for c in sorted({c for r in rounds for c in r}, key=int):
        got = [r.get(c) or {} for r in rounds]
        points = [g.get("speedup") for g in got if g.get("speedup")]
        if len(points) < 2:
            continue
        ratio = max(points) / min(points)
        shared = all(g.get("low") is not None for g in got) and max(g["low"] for g in got) <= min(g["high"] for g in got)
        per_level[c] = {"rounds": [g.get("says") for g in got], "apart": round(ratio, 3), "overlap": shared}
        apart, overlap = max(apart, ratio), overlap and shared
    log(f"repeatability: apart by {apart:.2f}x at worst; intervals overlap: {overlap}")
    return round(apart, 3), {"levels": per_level, "overlap": overlap, "spread": data.get("spread")}, None
