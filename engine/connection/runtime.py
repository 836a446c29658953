"""The host runtime: dflash_host (the modules' helpers) and, for hosts that lack them, psutil and tenacity.

At first contact the worker reports what it cannot import: dflash_host of this control node's
version (the runtime key starts with a hash of the package's files, so a changed package is shipped
again and each version is cached apart on the host), and psutil or tenacity when the host has no copy
of its own. The engine then sends one zip of what is missing, unpacked under the host user's cache dir
and reused by later runs. psutil and tenacity come from the control node's own installed copies when
they fit the host (same machine type, Linux, psutil's extension built for the stable ABI), else from
wheels for the host's platform downloaded on the control node (`pip download`), so the host itself
never needs the network.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from engine.cache import CACHE
from engine.errors import HostUnreachable

PACKAGES = ("psutil", "tenacity")  # third-party: shipped only to hosts that cannot import them
HOST_PACKAGE = "dflash_host"  # ours: shipped to every host, once per version
HOST_PACKAGE_DIR = Path(__file__).resolve().parents[2] / HOST_PACKAGE
_built: dict[str, tuple[str, bytes]] = {}
_build_lock = threading.Lock()  # hosts connect in parallel threads: build (and download) once


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _files(d: Path, suffix: str = "") -> list[Path]:
    """The files under `d` whose names end in `suffix`, sorted, bytecode folders left out (os.walk: less CPU
    than pathlib's rglob, and every run walks dflash_host for its version)."""
    out: list[Path] = []
    for root, dirs, names in os.walk(d):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        out += [Path(root, n) for n in names if n.endswith(suffix) and os.path.isfile(os.path.join(root, n))]
    return sorted(out)  # regular files only: an editor's dangling lock link (.#name.py) is not one


def host_package_files() -> list[Path]:
    """The files of dflash_host that make up a version of it (its sources; never bytecode)."""
    return _files(HOST_PACKAGE_DIR, ".py")


def host_package_hash() -> str:
    """A hash of dflash_host's file names and contents: the version every host must run. Computed once per
    version of the files (their sizes and times are checked, not their contents re-read), and the files are
    looked at again only after STAMP_TTL_S: every host's greeting needs it, and walking the package's ~60 files
    for each of 100 hosts cost about 5 ms a host of the control node's CPU."""
    now = time.monotonic()
    if _LAST and now - _LAST[0] < STAMP_TTL_S:
        return _LAST[1]
    files = host_package_files()
    stamp = tuple((str(p), st.st_mtime_ns, st.st_size) for p, st in ((p, p.stat()) for p in files))
    cached = _HASHES.get(stamp)
    if cached is None:
        digest = hashlib.sha256()
        for path in files:
            digest.update(path.relative_to(HOST_PACKAGE_DIR).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
        cached = _HASHES[stamp] = digest.hexdigest()[:16]
    _LAST[:] = [now, cached]
    return cached


_HASHES: dict[tuple, str] = {}
_LAST: list = []  # [when the files were last looked at, their hash]
STAMP_TTL_S = 2.0


def _zip(dirs: list[Path]) -> bytes:
    """One zip of the third-party package folders `dirs` and of dflash_host's sources."""
    import zipfile  # here: only a host without this runtime needs it, and every run's start would pay its import

    entries = [(path, path.relative_to(d.parent)) for d in dirs for path in _files(d)]
    entries += [(path, path.relative_to(HOST_PACKAGE_DIR.parent)) for path in host_package_files()]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, name in entries:
            # A fixed date and mode: the zip (and the key hashed from it) depend on the contents only, so a fresh
            # checkout of the same version does not ship the package again.
            info = zipfile.ZipInfo(name.as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, path.read_bytes())
    return buf.getvalue()


def _local_fits(hello: dict) -> bool:
    import platform  # here: its import compiles regexes, and only a host without the runtime needs it

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


def _from_wheels(hello: dict, wanted: tuple[str, ...]) -> list[Path]:
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
        import zipfile

        for whl in wheel_dir.glob("*.whl"):
            with zipfile.ZipFile(whl) as zf:
                zf.extractall(unpacked)
    return [unpacked / p for p in wanted]


def runtime_for(hello: dict) -> tuple[str, bytes]:
    """(key, zip bytes) of a runtime for the host described in `hello`: dflash_host, plus the third-party
    packages it said it lacks, in builds that host can import. The key is VERSION-CONTENT: the package's
    hash, then the zip's."""
    lacking = tuple(p for p in PACKAGES if p in (hello.get("missing") or ()))
    fits = bool(lacking) and _local_fits(hello)
    source = "none" if not lacking else "local" if fits else f"{hello.get('python')}-{hello.get('machine')}"
    version = host_package_hash()
    with _build_lock:
        return _build(f"{version}:{source}:{','.join(lacking)}", version, lacking, fits, hello)


def _build(cache_key: str, version: str, lacking: tuple[str, ...], fits: bool, hello: dict) -> tuple[str, bytes]:
    if cache_key not in _built:
        dirs = [_package_dir(p) for p in lacking] if fits else _from_wheels(hello, lacking) if lacking else []
        if any(d is None for d in dirs):
            raise HostUnreachable("the control node itself lacks psutil/tenacity; pip install -r requirements.txt")
        blob = _zip(dirs)  # type: ignore[arg-type]
        _built[cache_key] = (f"{version}-{hashlib.sha256(blob).hexdigest()[:12]}", blob)
    return _built[cache_key]


def local_key() -> str:
    """The key of the runtime last sent from this control node when it holds this version of dflash_host,
    else "" (a host then reports dflash_host missing and gets the current version)."""
    marker = CACHE / "runtime-key"
    try:
        key = marker.read_text().strip()
    except OSError:
        return ""
    return key if key.startswith(host_package_hash() + "-") else ""


def remember_key(key: str) -> None:
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
        (CACHE / "runtime-key").write_text(key)
    except OSError:
        pass
