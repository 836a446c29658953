"""What a host is: OS, python, CPUs, memory, disk, systemd, and its NVIDIA GPUs.

Gathered at the start of every play (the variable `facts`); roles decide from it (flash-attn line
from the compute capability, GPU roles skip without a driver). Reads /proc and /etc directly and
calls nvidia-smi at most twice, so it stays fast; it never changes the host. The same gathering
returns Ansible's facts (`ansible_facts`: ansible_distribution, ansible_python...) for playbooks
written for Ansible (dflash_host/host/ansible_facts.py).
"""

from __future__ import annotations

import getpass
import os
import platform
import socket
import sys

from dflash_host.host import ansible_facts, systemd
from dflash_host.host.gpus import NoDriver, query_cuda_version, query_gpus
from dflash_host.module import Context, main

ARGS = {
    "nvidia_smi": {"include": "nvidia_smi"},
    "disk_paths": {"type": "list", "default": ["~"], "var": "facts_disk_paths",
                   "help": "paths whose filesystem's free and total MiB are reported (facts.disk)"},
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("disk_paths", "nvidia_smi")


def parse_meminfo(text: str) -> dict:
    """{total, available} in MiB from /proc/meminfo (kB lines)."""
    kb = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            kb[key] = int(parts[0])
    available = kb.get("MemAvailable", kb.get("MemFree", 0) + kb.get("Buffers", 0) + kb.get("Cached", 0))
    return {"total": kb.get("MemTotal", 0) // 1024, "available": available // 1024}


def gpu_facts(gpus: list | None, reason: str, cuda_version: str | None) -> tuple[dict, list]:
    """facts.gpu and facts.gpus from a parsed --query-gpu answer (None: no driver, with reason)."""
    if not gpus:
        return {"driver": False, "reason": reason, "driver_version": None, "cuda_version": None, "count": 0}, []
    summary = {
        "driver": True,
        "reason": "",
        "driver_version": gpus[0].get("driver_version"),
        "cuda_version": cuda_version,
        "count": len(gpus),
    }
    return summary, [{k: v for k, v in g.items() if k != "driver_version"} for g in gpus]


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def disk_facts(paths: list) -> dict:
    """Free/total MiB of each path's filesystem; a path not made yet reports its nearest parent."""
    out = {}
    for given in paths:
        path = os.path.abspath(os.path.expanduser(str(given)))
        probe = path
        while not os.path.exists(probe) and os.path.dirname(probe) != probe:
            probe = os.path.dirname(probe)
        try:
            st = os.statvfs(probe)
        except OSError as exc:
            out[str(given)] = {"path": path, "exists": False, "error": str(exc), "free_mib": None, "total_mib": None}
            continue
        out[str(given)] = {
            "path": path,
            "exists": probe == path,
            "free_mib": st.f_bavail * st.f_frsize // (1024 * 1024),
            "total_mib": st.f_blocks * st.f_frsize // (1024 * 1024),
        }
    return out


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def run(args: dict, ctx: Context) -> dict:
    uname = platform.uname()
    release = ansible_facts.parse_os_release(_read("/etc/os-release"))
    try:
        gpus = query_gpus(args["nvidia_smi"])
        reason = ""
    except NoDriver as exc:
        gpus, reason = None, str(exc)
    cuda = query_cuda_version(args["nvidia_smi"]) if gpus else None
    gpu, gpu_list = gpu_facts(gpus, reason, cuda)
    facts = {
        "hostname": socket.gethostname(),
        "user": _user(),
        "home": os.path.expanduser("~"),
        "os": {
            "system": uname.system,
            "kernel": uname.release,
            "distribution": release.get("PRETTY_NAME") or release.get("NAME") or "",
            "distribution_id": release.get("ID", ""),
            "distribution_version": release.get("VERSION_ID", ""),
            "machine": uname.machine,
        },
        "python": {"executable": sys.executable, "version": platform.python_version()},
        "cpu_count": os.cpu_count() or 1,
        "memory_mib": parse_meminfo(_read("/proc/meminfo")),
        "disk": disk_facts(args["disk_paths"] or []),
        "systemd": systemd.present(),
        "gpu": gpu,
        "gpus": gpu_list,
    }
    if gpu_list:
        names = ", ".join(f"{g['index']}: {g['name']} (cc {g['compute_capability']})" for g in gpu_list)
        gpu_msg = f"{len(gpu_list)} GPU(s) [{names}], driver {gpu['driver_version']}, CUDA {cuda}"
    else:
        gpu_msg = f"no GPU ({reason})"
    msg = f"{facts['hostname']}: {facts['os']['distribution'] or uname.system}, python {facts['python']['version']}, {gpu_msg}"
    return {"changed": False, "msg": msg, "facts": facts, "ansible_facts": ansible_facts.gather()}


if __name__ == "__main__":
    main(ARGS, run)
