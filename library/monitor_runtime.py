"""A lasting copy of the host runtime for the monitor agent (`python3 -m dflash_host.monitor`), and its command.

The engine's runtime (dflash_host, and psutil/tenacity where the host lacks them) lives in a cache the next
version replaces; an agent kept running needs its own copy. This copies the packages this worker imports from
the runtime (dflash_host always; psutil and tenacity only where they came with it, not from the host's python)
into <dfp_root>/monitor/runtime-<hash>/ (the hash of their files: a new version is a new folder, and older
folders holding the tool's marker are removed), and returns the agent's `argv` (this worker's python) and
`environment` (PYTHONPATH), for library/daemon.py, and the `unit` text where systemd runs it (quoted and checked
as the vLLM server's unit is: dflash_host/vllm/systemd_unit.py). A second run with the same runtime is ok.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys

from dflash_host.host.files import atomic_write
from dflash_host.host.paths import managed_path
from dflash_host.module import Context, ModuleError, main
from dflash_host.vllm import program_unit

ARGS = {
    "root": {"include": "dfp_root", "help": "dfp_root: the copy lies in <dfp_root>/monitor"},
    "textfile_dir": {"type": "path", "default": None, "var": "prometheus_textfile_dir",
                     "help": "where the agent writes dflash_host.prom; none: <dfp_root>/metrics"},
    "pidfile": {"include": "vllm_pidfile", "help": "the server's pidfile the agent reads (its state, the running k)"},
    "nvidia_smi": {"include": "nvidia_smi"},
    "every_s": {"type": "int", "default": 15, "var": "monitor_every_s", "help": "seconds between the agent's readings"},
}
# The arguments that decide what runs or which file, folder or address is touched (engine/run/trust.py).
CODE_ARGS = ("root", "textfile_dir", "pidfile", "nvidia_smi")
MARKER = ".dflash-monitor-runtime"  # in every folder this module made: only those are ever removed
PACKAGES = ("dflash_host", "psutil", "tenacity")


def shipped() -> dict:
    """{name: folder} of the packages to copy: dflash_host, and the others where they lie beside it (the runtime)."""
    import dflash_host

    home = os.path.dirname(os.path.dirname(os.path.abspath(dflash_host.__file__)))
    out = {}
    for name in PACKAGES:
        module = __import__(name)
        folder = os.path.dirname(os.path.abspath(module.__file__ or ""))
        if name == "dflash_host" or os.path.dirname(folder) == home:
            out[name] = folder
    return out


def files_of(folder: str) -> list[str]:
    """The package's files, relative, sorted; bytecode left out."""
    out = []
    for base, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        out += [os.path.relpath(os.path.join(base, n), folder) for n in names if not n.endswith(".pyc")]
    return sorted(out)


def digest(packages: dict) -> str:
    h = hashlib.sha256()
    for name, folder in sorted(packages.items()):
        for rel in files_of(folder):
            h.update(f"{name}/{rel}\0".encode())
            with open(os.path.join(folder, rel), "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()[:16]


def place(packages: dict, target: str) -> None:
    """Copy the packages into target (through a temp folder renamed into place), marked as the tool's."""
    tmp = f"{target}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    for name, folder in packages.items():
        shutil.copytree(folder, os.path.join(tmp, name), ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    atomic_write(os.path.join(tmp, MARKER), b"made by dflash-provision's monitor_runtime module\n", mode=0o644)
    os.replace(tmp, target)


def prune(base: str, keep: str, ctx: Context) -> list:
    """Remove the older copies this module made (the marker proves it); anything else there is left."""
    gone = []
    for entry in sorted(os.listdir(base)):
        path = os.path.join(base, entry)
        if path != keep and entry.startswith("runtime-") and os.path.isfile(os.path.join(path, MARKER)) \
                and not os.path.islink(path):
            if not ctx.check:
                shutil.rmtree(path)
            gone.append(path)
    return gone


def run(args: dict, ctx: Context) -> dict:
    root = args["root"]
    if not root:
        raise ModuleError("dfp_root is empty; the monitor agent's runtime lies inside it: set dfp_root")
    base = managed_path(os.path.join(root, "monitor"), "dfp_root/monitor", root)
    packages = shipped()
    target = os.path.join(base, f"runtime-{digest(packages)}")
    changed = not os.path.isfile(os.path.join(target, MARKER))
    if changed and not ctx.check:
        os.makedirs(base, exist_ok=True)
        place(packages, target)
    removed = prune(base, target, ctx) if os.path.isdir(base) else []
    textfile_dir = args["textfile_dir"] or os.path.join(root, "metrics")
    pidfile = args["pidfile"] or os.path.join(root, "run", "vllm.pid")
    argv = [sys.executable, "-m", "dflash_host.monitor", "--dfp-root", root, "--textfile-dir", textfile_dir,
            "--pidfile", pidfile, "--every", str(args["every_s"])]
    argv += ["--nvidia-smi", args["nvidia_smi"]] if args["nvidia_smi"] else []
    environment = {"PYTHONPATH": target}
    unit = program_unit("dflash-provision monitor agent (textfile for node_exporter)", argv, environment,
                        "the monitor agent's (prometheus_textfile_dir, vllm_pidfile, nvidia_smi)")
    return {"changed": changed or bool(removed), "runtime": target, "packages": sorted(packages), "removed": removed,
            "argv": argv, "environment": environment, "unit": unit}


if __name__ == "__main__":
    main(ARGS, run)
