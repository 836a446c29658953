"""What the NVIDIA driver says about GPUs and their holders: nvidia-smi queries and a /proc fd scan.

Shared by `facts` (inventory of GPUs) and `gpu_cleanup` (who holds GPU memory, and waiting until it is
released). Parsing is done by small pure functions over nvidia-smi's CSV text so it can be tested as
tables; the I/O wrappers run nvidia-smi with an argv list and a timeout and turn every way it can fail
into `NoDriver(reason)`. Standard library only (facts must stay fast: no psutil import here; tenacity
is imported by the one function that waits).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import TYPE_CHECKING

from dflash_host.module import ModuleError

if TYPE_CHECKING:  # annotations only
    from dflash_host.module import Context

# The command run when the task names none (the nvidia_smi variable undefined: a play without the common
# roles' defaults, or a module run by hand).
COMMAND = "nvidia-smi"
GPU_FIELDS = ("index", "name", "uuid", "compute_cap", "memory.total", "memory.used", "driver_version")
APP_FIELDS = ("pid", "process_name", "used_memory", "gpu_uuid")
CSV_FORMAT = "--format=csv,noheader,nounits"
DEFAULT_TIMEOUT_S = 20.0
DEVICE_PREFIX = "/dev/nvidia"

_CUDA_RE = re.compile(r"CUDA Version\s*:\s*([0-9]+(?:\.[0-9]+)*)")
_NA = {"", "[N/A]", "N/A", "[Not Supported]", "[Insufficient Permissions]", "[Unknown Error]"}


class NoDriver(Exception):
    """nvidia-smi is missing or cannot talk to a driver; the message says which and why."""


# ---------------------------------------------------------------- pure parsing


def _num(text: str) -> int | None:
    """An integer MiB/PID field, or None for nvidia-smi's [N/A]-style placeholders."""
    text = text.strip()
    if text in _NA:
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def split_csv_line(line: str) -> list[str]:
    """nvidia-smi's CSV: fields separated by ', '; names never contain commas except GPU names,
    which are not quoted, so the caller passes the expected field count."""
    return [part.strip() for part in line.split(",")]


def parse_gpu_csv(text: str, fields: tuple = GPU_FIELDS) -> list[dict]:
    """Parse `--query-gpu=index,name,uuid,compute_cap,memory.total,memory.used,driver_version`
    (csv,noheader,nounits) into facts.gpus entries (plus driver_version for facts.gpu).

    `fields` is GPU_FIELDS, or GPU_FIELDS without compute_cap for drivers older than 510 that do
    not know that field (compute_capability is then None).
    """
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = split_csv_line(line)
        if len(parts) < len(fields):
            raise ValueError(f"unexpected nvidia-smi --query-gpu line {line!r}")
        # A GPU name could contain a comma: the surplus fields belong to the name.
        extra = len(parts) - len(fields)
        row = dict(zip(fields, [parts[0], ", ".join(parts[1 : 2 + extra]), *parts[2 + extra :]]))
        index, name, uuid, total, used, driver = (
            row["index"],
            row["name"],
            row["uuid"],
            row["memory.total"],
            row["memory.used"],
            row["driver_version"],
        )
        cc = row.get("compute_cap", "")
        idx = _num(index)
        if idx is None:
            raise ValueError(f"unexpected GPU index in nvidia-smi line {line!r}")
        gpus.append(
            {
                "index": idx,
                "name": name,
                "uuid": uuid,
                "compute_capability": None if cc in _NA else cc,
                "memory_total_mib": _num(total),
                "memory_used_mib": _num(used),
                "driver_version": None if driver in _NA else driver,
            }
        )
    return gpus


def parse_cuda_version(text: str) -> str | None:
    """The CUDA version from `nvidia-smi --version` ("CUDA Version : 13.0") or its table header."""
    match = _CUDA_RE.search(text or "")
    return match.group(1) if match else None


def parse_compute_apps(text: str) -> list[dict]:
    """Parse `--query-compute-apps=pid,process_name,used_memory,gpu_uuid` (csv,noheader,nounits).

    Lines that are not process rows (e.g. "No running processes found") are ignored; used memory
    that the driver does not report (in a container, without permission) becomes None.
    """
    apps = []
    for line in text.splitlines():
        parts = split_csv_line(line)
        if len(parts) < len(APP_FIELDS):
            continue
        pid = _num(parts[0])
        if pid is None:
            continue
        # A process name could contain commas: pid first, memory and uuid last.
        name = ", ".join(parts[1 : len(parts) - 2])
        apps.append({"pid": pid, "process_name": name, "used_mib": _num(parts[-2]), "gpu_uuid": parts[-1]})
    return apps


def driver_failure_reason(cmd: str, returncode: int, output: str) -> str:
    """One line saying why nvidia-smi gave no GPU list."""
    text = " ".join((output or "").split())
    if len(text) > 300:
        text = text[:300] + "..."
    return f"'{cmd}' exited with {returncode}: {text or 'no output'}"


# ---------------------------------------------------------------- nvidia-smi


def resolve(cmd: str | None) -> str:
    """The nvidia-smi executable to run (None: COMMAND from PATH), or NoDriver when there is none."""
    cmd = cmd or COMMAND
    if os.sep in cmd:
        if os.path.isfile(cmd) and os.access(cmd, os.X_OK):
            return cmd
        raise NoDriver(f"'{cmd}' does not exist or is not executable; no NVIDIA driver tools at that path")
    found = shutil.which(cmd)
    if not found:
        raise NoDriver(f"'{cmd}' is not on PATH; this host has no NVIDIA driver installed")
    return found


def smi(cmd: str | None, args: list[str], timeout: float = DEFAULT_TIMEOUT_S) -> str:
    """Run nvidia-smi with argv `args`; return stdout or raise NoDriver with the reason."""
    exe, cmd = resolve(cmd), cmd or COMMAND
    try:
        proc = subprocess.run(
            [exe, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise NoDriver(f"'{cmd}' did not answer within {timeout:g} s; the driver may be hung")
    except OSError as exc:
        raise NoDriver(f"'{cmd}' could not be started: {exc}")
    out = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        raise NoDriver(driver_failure_reason(cmd, proc.returncode, out))
    return out


def query_gpus(cmd: str | None, timeout: float = DEFAULT_TIMEOUT_S) -> list[dict]:
    """Every GPU the driver sees (see parse_gpu_csv); NoDriver when there is no usable driver. `timeout` bounds
    each nvidia-smi call (the host agent, dflash_host.monitor, gives its period)."""
    cmd = cmd or COMMAND
    fields: tuple = GPU_FIELDS
    try:
        out = smi(cmd, ["--query-gpu=" + ",".join(fields), CSV_FORMAT], timeout)
    except NoDriver as exc:
        if "compute_cap" not in str(exc):  # "Field "compute_cap" is not a valid field to query."
            raise
        fields = tuple(f for f in GPU_FIELDS if f != "compute_cap")
        out = smi(cmd, ["--query-gpu=" + ",".join(fields), CSV_FORMAT], timeout)
    try:
        gpus = parse_gpu_csv(out, fields)
    except ValueError as exc:
        raise NoDriver(f"'{cmd}' answered in an unexpected format ({exc})")
    if not gpus:
        raise NoDriver(f"'{cmd}' lists no GPUs; the driver is loaded but sees no device")
    return gpus


def query_cuda_version(cmd: str | None) -> str | None:
    """The CUDA version the driver supports: `nvidia-smi --version`, else the table header."""
    for args in (["--version"], []):
        try:
            version = parse_cuda_version(smi(cmd, args))
        except NoDriver:
            continue
        if version:
            return version
    return None


def query_compute_apps(cmd: str | None) -> list[dict]:
    """Processes with a CUDA context, as the driver lists them (PIDs of this PID namespace or not)."""
    return parse_compute_apps(smi(cmd, ["--query-compute-apps=" + ",".join(APP_FIELDS), CSV_FORMAT]))


# ---------------------------------------------------------------- free or busy


def select_gpus(gpus: list, requested: list | None) -> list[int]:
    """The indices that must end up free: `requested` (checked against what exists) or all."""
    indices = [g["index"] for g in gpus]
    if requested is None:
        return indices
    out = []
    for value in requested:
        try:
            idx = int(value)
        except (TypeError, ValueError):
            raise ModuleError(f"gpus entry {value!r} is not a GPU index; use numbers such as [0, 1]")
        if idx not in indices:
            raise ModuleError(f"gpus names GPU {idx}, but this host has GPU(s) {indices}; fix 'gpus'")
        out.append(idx)
    return out


def busy(gpus: list, indices: list, threshold_mib: int) -> list[dict]:
    """The selected GPUs whose used memory is at or above the threshold (unknown counts as busy)."""
    return [g for g in gpus if g["index"] in indices and (g["memory_used_mib"] is None or g["memory_used_mib"] >= threshold_mib)]


def used_line(gpus: list, indices: list) -> str:
    return ", ".join(f"GPU {g['index']} {g['memory_used_mib']} MiB" for g in gpus if g["index"] in indices)


def query_or_fail(cmd: str | None) -> list:
    """query_gpus for a run that has already seen the driver: losing it now is an error, not a skip."""
    try:
        return query_gpus(cmd)
    except NoDriver as exc:
        raise ModuleError(f"nvidia-smi stopped answering while freeing the GPU: {exc}")


def wait_until_free(cmd: str | None, indices: list, threshold_mib: int, timeout_s: float, ctx: Context) -> list:
    """Poll nvidia-smi (tenacity, bounded by timeout_s) until the GPUs are free; return the last reading."""
    import tenacity

    def note(state: tenacity.RetryCallState) -> None:
        if state.outcome is not None:
            ctx.say(f"waiting for GPU memory to be released: {used_line(state.outcome.result(), indices)}")

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_exponential(multiplier=0.05, max=1.0),
        retry=tenacity.retry_if_result(lambda g: bool(busy(g, indices, threshold_mib))),
        before_sleep=note,
        retry_error_callback=lambda state: state.outcome.result() if state.outcome is not None else None,
    )
    return retrying(query_or_fail, cmd)


# ---------------------------------------------------------------- /proc scan


def scan_device_fds(prefix: str | None = None, proc_root: str = "/proc") -> tuple[dict, int]:
    """PIDs with open file descriptors on NVIDIA device nodes (paths starting with `prefix`).

    Returns ({pid: sorted device paths}, count of processes whose fds could not be read). A non-root
    user cannot read other users' fds: those are counted, not guessed. This process is left out.
    """
    prefix = prefix or DEVICE_PREFIX
    found: dict[int, list[str]] = {}
    denied = 0
    me = os.getpid()
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return found, 0
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        fd_dir = os.path.join(proc_root, entry, "fd")
        try:
            fds = os.listdir(fd_dir)
        except PermissionError:
            denied += 1
            continue
        except OSError:
            continue  # gone meanwhile, or a kernel thread
        paths = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target.startswith(prefix):
                paths.add(target)
        if paths:
            found[int(entry)] = sorted(paths)
    return found, denied
