"""Human-readable summaries for `invoke facts` and `invoke status` (the JSON forms print the data as is)."""

from __future__ import annotations

import json
import shlex
from typing import Any


def _gpu_lines(facts: dict) -> list[str]:
    gpu = facts.get("gpu") or {}
    if not gpu.get("driver"):
        return [f"  gpu:     none ({gpu.get('reason', 'no NVIDIA driver')})"]
    lines = [f"  driver:  {gpu.get('driver_version')}  CUDA {gpu.get('cuda_version')}"]
    for g in facts.get("gpus") or []:
        lines.append(
            f"  gpu {g.get('index')}:   {g.get('name')}  sm {g.get('compute_capability')}  "
            f"{g.get('memory_used_mib')}/{g.get('memory_total_mib')} MiB used"
        )
    return lines


def render_summary(kind: str, host: str, data: Any) -> str:
    if not isinstance(data, dict):
        return f"{host}: {data}"
    if data.get("unreachable") or data.get("failed"):
        return f"{host}: {'UNREACHABLE' if data.get('unreachable') else 'FAILED'}: {data.get('msg')}"
    if kind == "facts":
        os_ = data.get("os") or {}
        py = data.get("python") or {}
        mem = data.get("memory_mib") or {}
        lines = [
            f"{host}:",
            f"  os:      {os_.get('distribution', '')} {os_.get('kernel', '')} {os_.get('machine', '')}".rstrip(),
            f"  python:  {py.get('version')} ({py.get('executable')})",
            f"  cpus:    {data.get('cpu_count')}   memory: {mem.get('available')}/{mem.get('total')} MiB available",
            f"  systemd: {'yes' if data.get('systemd') else 'no'}",
        ]
        for path, d in (data.get("disk") or {}).items():
            lines.append(f"  disk:    {path}: {d.get('free_mib')} MiB free")
        return "\n".join(lines + _gpu_lines(data))
    running = data.get("running")
    lines = [f"{host}: {'RUNNING' if running else 'NOT RUNNING'}{_node_label(data)}"]
    if running and data.get("role") == "worker":
        lines += [f"  pid {data.get('pid')}  up {data.get('uptime_s')} s  health {data.get('health')}"]
        lines += _worker_lines(data)
    elif running:
        ar = data.get("acceptance_rate")
        mal = data.get("mean_acceptance_length")
        lines += [
            f"  pid {data.get('pid')}  port {data.get('port')}  up {data.get('uptime_s')} s  health {data.get('health')}",
            f"  serves:  {data.get('served_model')}",
            *([f"  {endpoint_text(host, data['endpoint'])}"] if data.get("endpoint") else []),
            f"  acceptance rate: {'n/a' if ar is None else f'{ar:.1%}'}   mean acceptance length: {'n/a' if mal is None else f'{mal:.2f}'}"
            + _unjudged(data),
        ]
        lines += _worker_lines(data)
    if data.get("gpu_used_mib") is not None:
        lines.append(f"  GPU memory used: {data.get('gpu_used_mib')} MiB")
    # a headless node serves no API (its cluster is measured at the head); a torn-down host serves nothing
    if data.get("role") != "worker" and not data.get("torn_down"):
        lines += _speed_lines(data.get("speed") or {}, cluster=data.get("role") == "head")
    if data.get("msg"):
        lines.append(f"  {data['msg']}")
    return "\n".join(lines)


def _unjudged(data: dict) -> str:
    """A rate no min_acceptance_rate judges says so (the local random pair's ~0% is expected, not a fault)."""
    if data.get("acceptance_rate") is None or "min_acceptance_rate" not in data or data["min_acceptance_rate"] is not None:
        return ""
    return "   (not judged: no min_acceptance_rate here)"


def endpoint_text(host: str, endpoint: dict) -> str:
    """Where the server listens and how to talk to it, as one line a person can paste: the address, the served
    model's name and a curl of a completion, run on the host (a server on a loopback address answers only there)."""
    name = endpoint.get("served_model_name")
    body = json.dumps({"model": name, "prompt": "Hello", "max_tokens": 16})
    auth = ' -H "Authorization: Bearer $VLLM_API_KEY"' if endpoint.get("api_key_set") else ""
    key = " (VLLM_API_KEY: the host's vllm_api_key)" if auth else ""
    return (f"vLLM listens on {endpoint.get('listen')} and serves {name!r} (OpenAI API at {endpoint.get('url')}); "
            f"try it on {host}: curl -s {endpoint.get('url')}/completions -H 'Content-Type: application/json'{auth} "
            f"-d {shlex.quote(body)}{key}")


def _node_label(data: dict) -> str:
    """A node of a serving cluster says which: the head (the API) or a headless node, and its rank."""
    if data.get("role") not in ("head", "worker"):
        return ""
    kind = "head" if data["role"] == "head" else "headless node"
    return f"  ({kind}, rank {data.get('rank')} of {data.get('nnodes')})"


def _worker_lines(data: dict) -> list[str]:
    workers = data.get("local_workers")
    if not isinstance(workers, list) or data.get("role") not in ("head", "worker"):
        return []
    joined = sum(1 for w in workers if isinstance(w, dict) and w.get("connected"))
    return [f"  local workers: {len(workers)} running, {joined} joined to the head"]


def _speed_lines(speed: dict, cluster: bool = False) -> list[str]:
    """The last measured speed-up (serving-bench, tune or the speed gate), its k and when."""
    if not speed.get("speedup"):
        how = ("speedup_gate: warn, then invoke serving-cluster" if cluster
               else "invoke serving-bench --compare-baseline, or invoke tune")
        return [f"  speed-up: not measured ({how})"]
    ratios = ", ".join(f"{x:.2f}x at concurrency {c}" for c, x in sorted(speed["speedup"].items(), key=lambda i: int(i[0]))
                       if x is not None)
    k = speed.get("num_speculative_tokens")
    lines = [f"  speed-up: {ratios or 'n/a'} (k={k if k is not None else '?'}, measured {speed.get('measured_at_utc')}"
             f" by {speed.get('source') or 'a measurement'})"]
    for c, v in sorted((speed.get("comparison") or {}).items(), key=lambda i: int(i[0])):
        lines.append(f"    concurrency {c}: {v.get('says')}")
    if speed.get("schedule"):
        lines.append("    k per batch size: " + ", ".join(f"{a}-{b}: {kk}" for a, b, kk in speed["schedule"]))
    return lines
