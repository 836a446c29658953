"""One reading of the host for the agent's textfile: GPU memory, the tool's server, the running launch's k.

Every part is read the way the rest of the tool reads it (no second reader): nvidia-smi through
dflash_host.host.gpus.query_gpus (bounded by a deadline), the server through the launch record and
records.launch_state (the pidfile proven by PID, start time and command line, or the systemd unit), k and
the schedule from the launch's speculative config (what vLLM was started with). A part that cannot be read is
left out and its reason kept, so a hung driver never stops the rest from being exported.
"""

from __future__ import annotations

from dflash_host.host.gpus import NoDriver, query_gpus
from dflash_host.module import ModuleError
from dflash_host.vllm import launch_state, paths, read_launch


def gpu_part(nvidia_smi: str | None, timeout_s: float) -> dict:
    """{"gpus": [{index, uuid, used_mib, total_mib}], "driver_up": bool, "gpu_error": reason or None}."""
    try:
        found = query_gpus(nvidia_smi, timeout=timeout_s)
    except NoDriver as exc:
        return {"gpus": [], "driver_up": False, "gpu_error": str(exc)}
    gpus = [{"index": g["index"], "uuid": g["uuid"], "used_mib": g["memory_used_mib"],
             "total_mib": g["memory_total_mib"]} for g in found]
    return {"gpus": gpus, "driver_up": True, "gpu_error": None}


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def launch_k(launch: dict) -> tuple:
    """(k, schedule) of a launch: its speculative config's num_speculative_tokens (0 without a drafter) and
    num_speculative_tokens_per_batch_size ([[first, last, k], ...], or None). A value of another shape (a record
    edited by hand) reads as None: it is left out of the textfile, never a crash of the agent."""
    spec = launch.get("speculative")
    if not isinstance(spec, dict):
        return 0, None
    k = spec.get("num_speculative_tokens")
    return (k if _whole(k) else None), whole_bands(spec.get("num_speculative_tokens_per_batch_size"))


def whole_bands(value: object) -> list | None:
    """A schedule as [[first, last, k], ...] of whole numbers, or None (empty, or of another shape): a record or a
    host's answer is checked, never trusted."""
    if not isinstance(value, list) or not value:
        return None
    ok = all(isinstance(b, list) and len(b) == 3 and all(map(_whole, b)) for b in value)
    return value if ok else None


def server_part(pidfile: str) -> dict:
    """{"server_running": bool or None (unknown), "k", "schedule", "server_error"}: k and the schedule only while
    the server runs the rendered launch (it was started from that launch's fingerprint as the recorded PID)."""
    p = paths(pidfile)
    launch = read_launch(p["launch"])
    out: dict = {"server_running": False, "k": None, "schedule": None, "server_error": None}
    if launch is None:
        return out  # never provisioned, or torn down: nothing of ours runs
    try:
        state = launch_state(launch, p)
    except ModuleError as exc:  # systemctl did not answer, or a pidfile that is not the tool's
        return {**out, "server_running": None, "server_error": exc.msg}
    out["server_running"] = bool(state["now"]["alive"])
    if state["fresh"]:
        out["k"], out["schedule"] = launch_k(launch)
    return out


def read(pidfile: str, nvidia_smi: str | None, timeout_s: float) -> dict:
    """Everything the textfile holds, read now."""
    return {**gpu_part(nvidia_smi, timeout_s), **server_part(pidfile)}
