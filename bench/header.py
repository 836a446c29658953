"""Header-only drafter inspection: a sparse drafter whose header declares multi-GB tensors.

The drafter has the shape of a 5-layer DFlash drafter for a 27B target (hidden 5120, fc.weight
[5120, 25600] bf16, about 3.4 GB declared) but its data are holes, so only the header exists on disk.
Measured: the drafter_config module in check mode (reads the header and the target's config, infers,
validates) in this process, and the same module as a task through run_playbook over `local` and SSH.
Bytes read: /proc/self/io rchar around the in-process call, and /proc/<worker>/io rchar of the host's
worker around the task (read by a command task whose parent is the worker), net of what a measuring
task alone reads (two measuring tasks back to back give that baseline).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "drafter_configs"
DRAFTER_CONFIG = FIXTURES / "qwen3.5-27b-dflash.json"
TARGET_CONFIG = FIXTURES / "targets" / "qwen3.5-27b.json"
MASK_TOKEN_ID = 248070


def _library_on_path() -> None:
    """The repository root (library.NAME, dflash_host.NAME) and the drafter config fixtures' helpers."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    if str(FIXTURES) not in sys.path:
        sys.path.append(str(FIXTURES))


def make_sparse_drafter(folder: Path) -> dict:
    """Write model.safetensors (sparse) and target/config.json under folder; return their facts."""
    _library_on_path()
    import json

    from make_checkpoint import drafter_tensors_for, write_sparse_safetensors

    published = json.loads(DRAFTER_CONFIG.read_text())
    tensors = drafter_tensors_for(published)
    drafter = folder / "drafter"
    target = folder / "target"
    drafter.mkdir(parents=True)
    target.mkdir()
    header_len = write_sparse_safetensors(str(drafter / "model.safetensors"), tensors, {"format": "pt"})
    shutil.copyfile(TARGET_CONFIG, target / "config.json")
    for p in (folder, drafter, target):
        os.chmod(p, 0o755)  # noqa: S103 - a temp folder the ssh benchmark user must read
    for p in (drafter / "model.safetensors", target / "config.json"):
        os.chmod(p, 0o644)
    st = os.stat(drafter / "model.safetensors")
    return {
        "drafter": str(drafter),
        "target": str(target),
        "header_bytes": 8 + header_len,
        "declared_bytes": st.st_size,
        "allocated_bytes": st.st_blocks * 512,
        "fc_shape": tensors["fc.weight"][1],
        "target_config_bytes": (target / "config.json").stat().st_size,
    }


def _rchar(pid: str = "self") -> int:
    with open(f"/proc/{pid}/io") as fh:
        for line in fh:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/PID/io")


def inspect_in_process(facts: dict, reps: int) -> dict:
    """The module's run() in check mode, here: median/min ms and bytes read (rchar) per call."""
    _library_on_path()
    from dflash_host.module import Context, execute
    from library import drafter_config as dc

    args = {"drafter": facts["drafter"], "target": facts["target"], "mask_token_id": MASK_TOKEN_ID}
    times, reads, result = [], [], {}
    for _ in range(reps):
        before = _rchar()
        started = time.perf_counter()
        result = execute(dc.ARGS, dc.run, dict(args), Context(check=True), "drafter_config")
        times.append(time.perf_counter() - started)
        reads.append(_rchar() - before)
    if result.get("failed"):
        raise RuntimeError(f"drafter_config failed on the sparse drafter: {result.get('msg')}")
    return {
        "ms_median": round(statistics.median(times) * 1000, 3),
        "ms_min": round(min(times) * 1000, 3),
        "rchar_median": int(statistics.median(reads)),
        "module_header_bytes_read": result.get("header_bytes_read"),
        "module_header_read_ms": result.get("header_read_ms"),
        "inferred": {k: result.get("inferred", {}).get(k) for k in ("hidden_size", "num_hidden_layers", "fc_shape")},
    }


def _io_task(name: str, register: str) -> dict:
    # $PPID of this sh is the worker (the command module starts it directly): its counters, not ours.
    return {"name": name, "command": {"argv": ["sh", "-c", "cat /proc/$PPID/io"]}, "register": register, "changed_when": False}


def inspection_playbook(path: Path, facts: dict) -> Path:
    args = {"drafter": facts["drafter"], "target": facts["target"], "mask_token_id": MASK_TOKEN_ID}
    tasks = [
        {
            "name": "Inspect the drafter (warm-up: the module's source reaches the worker)",
            "drafter_config": args,
            "check_mode": True,
        },
        _io_task("Worker I/O baseline a", "io_a"),  # a and b: what the measuring itself reads
        _io_task("Worker I/O baseline b", "io_b"),
        _io_task("Worker I/O before", "io_before"),
        {"name": "Inspect the drafter", "drafter_config": args, "check_mode": True, "register": "inspected"},
        _io_task("Worker I/O after", "io_after"),
    ]
    play = {"name": "Header-only drafter inspection", "hosts": "all", "gather_facts": False, "tasks": tasks}
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path


def _rchar_of(text: str) -> int:
    for line in text.splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError(f"no rchar line in {text!r}")


def inspect_through_engine(playbook: Path, inventory: Path, host: str) -> dict:
    """One run of the inspection playbook on `host`: the task's wall ms and the worker's bytes read."""
    from engine.api import run_playbook

    res = run_playbook(playbook, inventory, limit=host)
    if res.exit_code != 0:
        failed = [t for t in res.tasks if t["status"] in ("failed", "unreachable")]
        raise RuntimeError(f"inspection playbook failed on {host}: {failed[:1]}")
    task = res.find("Inspect the drafter", host)[0]
    before = _rchar_of(res.find("Worker I/O before", host)[0].result["stdout"])
    after = _rchar_of(res.find("Worker I/O after", host)[0].result["stdout"])
    base_a = _rchar_of(res.find("Worker I/O baseline a", host)[0].result["stdout"])
    base_b = _rchar_of(res.find("Worker I/O baseline b", host)[0].result["stdout"])
    return {
        "task_ms": round(task.duration_s * 1000, 3),
        "module_header_read_ms": task.result.get("header_read_ms"),
        "module_header_bytes_read": task.result.get("header_bytes_read"),
        "worker_rchar": after - before,
        # minus what one measuring task alone reads (its request line, the command's output pipe)
        "worker_rchar_net": (after - before) - (base_b - base_a),
    }


def run_section(inventory_for, hosts: dict, reps: int, log=print) -> dict:
    """inventory_for(name) -> inventory path holding that host; hosts: {"local": name, "ssh": name}."""
    folder = Path(tempfile.mkdtemp(prefix="dfp-bench-drafter-"))
    os.chmod(folder, 0o755)  # noqa: S103 - a temp folder the ssh benchmark user must read
    try:
        facts = make_sparse_drafter(folder)
        log(
            f"header: sparse drafter {facts['declared_bytes'] / 1e9:.2f} GB declared, "
            f"{facts['allocated_bytes']} bytes on disk, header {facts['header_bytes']} bytes"
        )
        out: dict = {"drafter": {k: v for k, v in facts.items() if k not in ("drafter", "target")}}
        out["in_process"] = inspect_in_process(facts, reps=max(5, reps * 3))
        pb = inspection_playbook(folder / "inspect.yaml", facts)
        for kind, name in hosts.items():
            runs = [inspect_through_engine(pb, inventory_for(name), name) for _ in range(max(1, reps))]
            out[kind] = {
                "task_ms_median": round(statistics.median(r["task_ms"] for r in runs), 3),
                "module_header_read_ms_median": round(statistics.median(r["module_header_read_ms"] for r in runs), 3),
                "worker_rchar_median": int(statistics.median(r["worker_rchar"] for r in runs)),
                "worker_rchar_net_median": int(statistics.median(r["worker_rchar_net"] for r in runs)),
                "module_header_bytes_read": runs[-1]["module_header_bytes_read"],
                "runs": runs,
            }
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)
