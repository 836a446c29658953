"""ansible-core's own integration targets, from the sdist of the ansible-core release the tests pin.

The sdist on PyPI carries test/integration/targets; it is fetched once with pip (sha256 checked where this
file knows it) and unpacked into the user's cache, so a run after the first costs no download."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import version
from pathlib import Path

KNOWN_SHA256 = {"2.19.14": "1e7612788eaa6b3c87a3670ce86c64b830eba0ae2b3fcb25a772f276704163b4"}
DOWNLOAD_TIMEOUT_S = 600


def ansible_core_version() -> str:
    """The release installed with the tests (constraints.txt pins it per python)."""
    return version("ansible-core")


def cache_root() -> Path:
    return Path(os.environ.get("DFP_ANSIBLE_TARGETS_CACHE", Path.home() / ".cache" / "dfp-ansible-targets"))


def targets_dir(release: str | None = None) -> Path:
    """test/integration/targets of `release` (default: the installed one), downloaded and unpacked once."""
    release = release or ansible_core_version()
    root = cache_root() / f"ansible_core-{release}"
    targets = root / "test" / "integration" / "targets"
    if targets.is_dir():
        return targets
    cache_root().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_root()) as tmp:
        archive = _download(release, Path(tmp))
        _unpack(archive, Path(tmp) / "unpacked")
        shutil.rmtree(root, ignore_errors=True)
        os.replace(Path(tmp) / "unpacked" / f"ansible_core-{release}", root)
    return targets


def _download(release: str, into: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                    "-d", str(into), f"ansible-core=={release}"],
                   check=True, timeout=DOWNLOAD_TIMEOUT_S, stdin=subprocess.DEVNULL)
    archive = into / f"ansible_core-{release}.tar.gz"
    expected = KNOWN_SHA256.get(release)
    if expected and hashlib.sha256(archive.read_bytes()).hexdigest() != expected:
        raise RuntimeError(f"{archive}: sha256 is not the known {expected} of ansible-core {release}'s sdist")
    return archive


def _unpack(archive: Path, into: Path) -> None:
    """Only the targets and what they read beside them; the tar filter refuses links out of the folder."""
    with tarfile.open(archive) as tar:
        wanted = [m for m in tar.getmembers() if "/test/integration/" in m.name]
        tar.extractall(into, members=wanted, filter="data")
