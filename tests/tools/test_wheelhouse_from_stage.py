"""tools/gpu/wheelhouse_from_stage.py on CPU: a staged wheel unpacked minus a "kernel" (as gpu-kit stages vLLM)
is packed again into a wheel whose RECORD verifies, and pip installs it offline from the wheelhouse into a real
venv whose own packages count as the base; what neither can meet is dropped and listed, what a dependency
wheel lacks is reported and stops the command."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import platform
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.fakes.wheels import build_wheel, simple_wheel

pytestmark = pytest.mark.usefixtures("clean_pip_config")  # this machine's pip setup stays out

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "gpu" / "wheelhouse_from_stage.py"
TAG = f"cp38-abi3-linux_{platform.machine()}"
REQUIRES = [
    "dfp-base>=1.0",  # on the base
    "dfp-dep>=1.0",  # in the wheelhouse
    "dfp-web[extra1]>=1.0",  # in the wheelhouse, its extra only in part
    "dfp-missing==2.0",  # nowhere
    'dfp-win; sys_platform == "win32"',  # not for this platform: left alone
    'dfp-bench; extra == "bench"',  # an extra nobody asks for: left alone
]


def staged_tree(tmp_path: Path) -> Path:
    """A wheel unpacked without one of the files its RECORD names, as gpu-kit's build.sh stages vLLM."""
    files = {
        "demo/__init__.py": "VERSION = '1.0'\n",
        "demo/kernel.so": b"\x7fELF kept",
        "demo/big_kernel.so": b"\x7fELF left out of the stage",
        "demo-1.0.dist-info/entry_points.txt": "[console_scripts]\ndemo = demo:main\n",
    }
    whl = build_wheel(tmp_path / "orig", "demo", "1.0", files, tag=TAG, requires=REQUIRES)
    tree = tmp_path / "stage"
    with zipfile.ZipFile(whl) as zf:
        zf.extractall(tree)
    (tree / "demo" / "big_kernel.so").unlink()
    meta = tree / "demo-1.0.dist-info" / "METADATA"
    meta.write_text(meta.read_text() + "\nThe long description stays as it is.\n")
    return tree


def wheels(folder: Path, dep_requires: list | None = None) -> Path:
    simple_wheel(folder, "dfp-dep", "1.0", requires=dep_requires)
    simple_wheel(folder, "dfp-web", "1.0", requires=['dfp-part; extra == "extra1"', 'dfp-absent; extra == "extra1"'])
    simple_wheel(folder, "dfp-part", "1.0")
    return folder


@pytest.fixture
def base(tmp_path) -> Path:
    """A real venv holding dfp-base: the interpreter the serving env would be built over."""
    venv = tmp_path / "base"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    own = simple_wheel(tmp_path / "base-wheels", "dfp-base", "1.5")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(own)], check=True)
    return py


def run(tree: Path, wheel_dir: Path, out: Path, py: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(SCRIPT), str(tree), str(wheel_dir), str(out), "--base-python", str(py)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def record_problems(whl: Path) -> list:
    """Entries of the wheel's RECORD whose digest or size is wrong, and files it does not list."""
    with zipfile.ZipFile(whl) as zf:
        record_name = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(zf.read(record_name).decode())))
        bad = []
        for path, digest, size in rows:
            if path == record_name:
                continue
            data = zf.read(path)
            want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if digest != want or int(size) != len(data):
                bad.append(path)
        return bad + sorted(set(zf.namelist()) - {r[0] for r in rows})


def test_the_repacked_wheel_installs_offline_over_the_base_with_what_cannot_be_met_dropped(tmp_path, base):
    out = tmp_path / "wheelhouse"
    res = run(staged_tree(tmp_path), wheels(tmp_path / "wheels"), out, base)
    assert res.returncode == 0, res.stdout + res.stderr
    whl = out / f"demo-1.0-{TAG}.whl"
    assert whl.is_file() and record_problems(whl) == []
    with zipfile.ZipFile(whl) as zf:
        names = zf.namelist()
        meta = zf.read("demo-1.0.dist-info/METADATA").decode()
    assert "demo/big_kernel.so" not in names and "demo/kernel.so" in names

    requires = [ln.split(": ", 1)[1] for ln in meta.splitlines() if ln.startswith("Requires-Dist: ")]
    assert requires == ["dfp-base>=1.0", "dfp-dep>=1.0", "dfp-web>=1.0", "dfp-part", 'dfp-win; sys_platform == "win32"',
                        'dfp-bench; extra == "bench"']
    assert meta.endswith("The long description stays as it is.\n")
    dropped = (out / "DROPPED-REQUIREMENTS.txt").read_text()
    assert "dfp-missing==2.0\tnot on the base; not in the wheelhouse" in dropped
    assert "dfp-web[extra1]>=1.0\textras left out (dfp-absent: " in dropped and "written instead: dfp-web>=1.0, dfp-part" in dropped
    assert "1 file(s) of its RECORD are not in the stage" in dropped
    assert not (out / "UNMET-IN-DEPENDENCIES.txt").exists()
    # the base is a venv: the serving env over it sees its packages (the venv role's .pth), and the note says so
    assert "is itself a virtual environment" in res.stdout and "site-packages through a .pth file" in res.stdout
    assert "warning: " + str(base) not in res.stdout

    install = subprocess.run([str(base), "-m", "pip", "install", "--no-index", "--find-links", str(out), "demo==1.0"],
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    check = "import importlib.metadata as m, demo; print(sorted(d.metadata['Name'] for d in m.distributions()))"
    seen = subprocess.run([str(base), "-c", check], capture_output=True, text=True, check=True).stdout
    assert all(f"'{n}'" in seen for n in ("demo", "dfp-base", "dfp-dep", "dfp-web", "dfp-part"))
    assert "dfp-missing" not in seen and "dfp-absent" not in seen
    assert (base.parent / "demo").is_file()  # the console script of the kept entry_points.txt


def test_a_dependency_wheel_that_needs_what_is_nowhere_is_reported_and_left_as_it_is(tmp_path, base):
    wheel_dir = wheels(tmp_path / "wheels", dep_requires=["dfp-gone>=3"])
    out = tmp_path / "wheelhouse"
    res = run(staged_tree(tmp_path), wheel_dir, out, base)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "dfp-dep 1.0 (wheelhouse) needs dfp-gone>=3: not on the base; not in the wheelhouse" in res.stdout
    assert "dfp-gone>=3" in (out / "UNMET-IN-DEPENDENCIES.txt").read_text()
    assert (out / "dfp_dep-1.0-py3-none-any.whl").read_bytes() == (wheel_dir / "dfp_dep-1.0-py3-none-any.whl").read_bytes()
