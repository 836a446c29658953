"""The module runtime: psutil and tenacity for hosts that lack them, with no package index on the host.

At first contact the worker reports which runtime packages it cannot import; the engine then sends a
zip of them, unpacked under the host user's cache dir and reused by later runs. The zip is made from
the control node's own installed copies when they fit the host (same machine type, Linux, psutil's
extension built for the stable ABI), else from wheels for the host's platform downloaded on the
control node (`pip download`), so the host itself never needs the network.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import platform
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

from engine.errors import HostUnreachable

PACKAGES = ("psutil", "tenacity")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dflash-provision"
_built: dict[str, tuple[str, bytes]] = {}
_build_lock = threading.Lock()  # hosts connect in parallel threads: build (and download) once


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _zip_dirs(dirs: list[Path]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for d in dirs:
            for path in sorted(d.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    zf.write(path, str(path.relative_to(d.parent)))
    return buf.getvalue()


def _local_fits(hello: dict) -> bool:
    if hello.get("machine") != platform.machine() or not str(hello.get("platform", "")).startswith("linux"):
        return False
    psutil_dir = _package_dir("psutil")
    if psutil_dir is None:
        return False
    exts = list(psutil_dir.glob("_psutil_linux*.so"))
    if not exts:
        return False
    if all("abi3" in e.name for e in exts):
        return True
    return hello.get("python", "").rsplit(".", 1)[0] == platform.python_version().rsplit(".", 1)[0]


def _from_wheels(hello: dict) -> list[Path]:
    """Download wheels for the host's python and machine into the control node's cache and unpack them."""
    pyver = ".".join(str(hello.get("python", "3.9")).split(".")[:2])
    machine = hello.get("machine") or "x86_64"
    tag = f"cp{pyver.replace('.', '')}-{machine}"
    wheel_dir = CACHE / "wheels" / tag
    unpacked = CACHE / "unpacked" / tag
    if not all((unpacked / p).is_dir() for p in PACKAGES):
        wheel_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--only-binary=:all:",
            "--no-deps",
            "--python-version",
            pyver,
            "--platform",
            f"manylinux2014_{machine}",
            "--implementation",
            "cp",
            "-d",
            str(wheel_dir),
            *PACKAGES,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise HostUnreachable(
                f"the host (python {pyver}, {machine}) lacks {', '.join(PACKAGES)} and wheels for it could not be "
                f"downloaded on the control node: {proc.stderr.strip()[-400:]}. Install them on the host "
                "(python3 -m pip install --user psutil tenacity) or put wheels in " + str(wheel_dir)
            )
        for whl in wheel_dir.glob("*.whl"):
            with zipfile.ZipFile(whl) as zf:
                zf.extractall(unpacked)
    return [unpacked / p for p in PACKAGES]


def runtime_for(hello: dict) -> tuple[str, bytes]:
    """(key, zip bytes) of a runtime that the host described in `hello` can import."""
    fits = _local_fits(hello)
    cache_key = "local" if fits else f"{hello.get('python')}-{hello.get('machine')}"
    with _build_lock:
        return _build(cache_key, fits, hello)


def _build(cache_key: str, fits: bool, hello: dict) -> tuple[str, bytes]:
    if cache_key not in _built:
        dirs = [_package_dir(p) for p in PACKAGES] if fits else _from_wheels(hello)
        if any(d is None for d in dirs):
            raise HostUnreachable("the control node itself lacks psutil/tenacity; pip install -r requirements.txt")
        blob = _zip_dirs(dirs)  # type: ignore[arg-type]
        _built[cache_key] = (hashlib.sha256(blob).hexdigest()[:16], blob)
    return _built[cache_key]


def local_key() -> str:
    """The key of the runtime the control node would send to a host like itself (cheap after first use)."""
    marker = CACHE / "runtime-key"
    try:
        return marker.read_text().strip()
    except OSError:
        return ""


def remember_key(key: str) -> None:
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
        (CACHE / "runtime-key").write_text(key)
    except OSError:
        pass
