"""pip (library/pip.py) against real ansible-core's: the same sequence of tasks (a venv made with `python -m venv`,
install from local wheels with --no-index, again, check mode of present/absent/another version, a requirements
file, absent, the argument checks) run by ansible-playbook and by us, each side into its own venv; compared per
task: failed, changed, msg (failures), and the fields Ansible returns (cmd with the side's folder written as <dir>,
name, version, state, requirements, virtualenv); then what each venv holds. No network: the wheels are made here
(a wheel is a zip: the package, its METADATA, WHEEL and RECORD) and pip is told --no-index."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from _ansible_side import placed, registered_by_ansible, registered_by_ours, same_flags

from tests.helpers import isolate_pip, required_ansible_tool

PY = sys.executable
FIND = "--no-index --find-links F"
SEQUENCE = [
    ("install-in-new-venv", {"pip": {"name": "tiny-dfp==0.1", "virtualenv": "@/venv",
                                     "virtualenv_command": f"{PY} -m venv", "extra_args": FIND}}),
    ("again", {"pip": {"name": ["tiny-dfp==0.1"], "virtualenv": "@/venv", "extra_args": FIND}}),
    ("check-present", {"pip": {"name": "tiny-dfp", "virtualenv": "@/venv"}, "check_mode": True}),
    ("check-other-version", {"pip": {"name": "tiny-dfp", "version": "0.2", "virtualenv": "@/venv"},
                             "check_mode": True}),
    ("check-range", {"pip": {"name": ["tiny-dfp>=0.1", "<0.2"], "virtualenv": "@/venv"}, "check_mode": True}),
    ("check-absent-missing", {"pip": {"name": "tiny-other", "state": "absent", "virtualenv": "@/venv"},
                              "check_mode": True}),
    ("check-new-venv", {"pip": {"name": "tiny-dfp", "virtualenv": "@/venv2"}, "check_mode": True}),
    ("requirements", {"pip": {"requirements": "@/req.txt", "virtualenv": "@/venv", "extra_args": FIND}}),
    ("requirements-again", {"pip": {"requirements": "@/req.txt", "virtualenv": "@/venv", "extra_args": FIND}}),
    ("absent", {"pip": {"name": "tiny-dfp", "state": "absent", "virtualenv": "@/venv"}}),
    ("absent-again", {"pip": {"name": "tiny-dfp", "state": "absent", "virtualenv": "@/venv"}}),
    ("no-name", {"pip": {"virtualenv": "@/venv"}}),
    ("name-and-requirements", {"pip": {"name": "x", "requirements": "r.txt"}}),
    ("version-and-specifier", {"pip": {"name": "tiny-dfp==0.1", "version": "0.2", "virtualenv": "@/venv"}}),
    ("latest-with-version", {"pip": {"name": "tiny-dfp", "version": "0.2", "state": "latest"}}),
    ("venv-python-with-venv", {"pip": {"name": "tiny-dfp", "virtualenv": "@/venv3",
                                       "virtualenv_command": f"{PY} -m venv", "virtualenv_python": "python3"}}),
    ("missing-package", {"pip": {"name": "tiny-none", "virtualenv": "@/venv", "extra_args": FIND}}),
]
ENV = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CONFIG_FILE": "/dev/null", "PIP_NO_INPUT": "1"}


def _wheel(folder: Path, version: str) -> None:
    name = f"tiny_dfp-{version}"
    files = {"tiny_dfp/__init__.py": f"VERSION = {version!r}\n",
             f"{name}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: tiny-dfp\nVersion: {version}\n",
             f"{name}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},,\n" for path in files) + f"{name}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{name}-py3-none-any.whl", "w") as zf:
        for path, text in {**files, f"{name}.dist-info/RECORD": record}.items():
            zf.writestr(path, text)


def _tasks(side: Path, wheels: Path) -> list[tuple[str, dict]]:
    return [(cid, dict(placed(t, {"@": str(side), " F": f" {wheels}"}), environment=ENV)) for cid, t in SEQUENCE]


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    work = tmp_path_factory.mktemp("pip")
    wheels = work / "wheels"
    wheels.mkdir()
    for version in ("0.1", "0.2"):
        _wheel(wheels, version)
    for side in ("ansible", "ours"):
        (work / side).mkdir()
        (work / side / "req.txt").write_text("tiny-dfp==0.2\n")
    (work / "home").mkdir()
    theirs = registered_by_ansible(required_ansible_tool("ansible-playbook"), work / "home", work,
                                   _tasks(work / "ansible", wheels))
    with pytest.MonkeyPatch.context() as mp:
        isolate_pip(mp)
        return work, theirs, registered_by_ours(work / "ours.yaml", _tasks(work / "ours", wheels))


def _scrub(value, work: Path, side: str):
    if isinstance(value, str):
        return value.replace(str(work / side), "<dir>")
    if isinstance(value, list):
        return [_scrub(v, work, side) for v in value]
    return value


@pytest.mark.parametrize("cid", [c[0] for c in SEQUENCE])
def test_pip_as_ansibles(both, cid):
    work, theirs, ours = both
    t, o = theirs[cid], ours[cid]
    same_flags(t, o, "failed", "changed")
    if t.get("failed"):
        if "stdout" in t["msg"] or "stderr" in t["msg"]:  # pip's own words: the same pip says the same
            assert "tiny-none" in o["msg"] and o["msg"].startswith(t["msg"][:8]), (t, o)
        else:
            assert o["msg"] == t["msg"], (t, o)
        return
    for key in ("name", "version", "state", "requirements", "virtualenv", "cmd"):
        if key in t:
            assert _scrub(o.get(key), work, "ours") == _scrub(t[key], work, "ansible"), (key, t, o)


def test_venvs_hold_alike(both):
    work, _t, _o = both

    def held(side):
        out = subprocess.run([str(work / side / "venv" / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                             capture_output=True, text=True, check=True, env={"PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        return sorted(line for line in out.stdout.splitlines() if line.startswith("tiny"))
    assert held("ours") == held("ansible")
    assert not (work / "ours" / "venv2").exists() and not (work / "ansible" / "venv2").exists()
