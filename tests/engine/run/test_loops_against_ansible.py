"""Loop forms, loop_control, the `diff` keyword, `!unsafe` and the special variables, run by real
ansible-playbook and by ours on the same playbook (a local host): both must pass every assert in it, with the
same recap. The playbook's asserts say what each construct gives (items, ansible_loop, index_var, ...)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.api import run_playbook
from tests.helpers import required_ansible_tool

PLAYBOOK = Path(__file__).with_name("loops_playbook.yaml")


@pytest.fixture()
def workdir(tmp_path) -> tuple[Path, Path]:
    (tmp_path / "files").mkdir()
    for name in ("a.txt", "b.txt"):
        (tmp_path / "files" / name).write_text(name)
    pb = tmp_path / "pb.yaml"
    pb.write_text(PLAYBOOK.read_text())
    inv = tmp_path / "inv"
    inv.write_text(f"h1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    return pb, inv


def test_loops_diff_unsafe_and_special_variables_as_ansible_playbook(workdir):
    pb, inv = workdir
    tool = required_ansible_tool("ansible-playbook")
    proc = subprocess.run([str(tool), "-i", str(inv), str(pb)], capture_output=True, text=True, timeout=300,
                          cwd=pb.parent, env={"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(pb.parent),
                                              "ANSIBLE_LOCAL_TEMP": str(pb.parent / ".tmp")})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    recap = next(line for line in proc.stdout.splitlines() if line.startswith("h1 ") and "ok=" in line)
    for out in ("diffed.txt", "plain.txt"):
        (pb.parent / "files" / out).unlink()
    ours = run_playbook(pb, inv)
    assert ours.exit_code == 0, ours.error or [t for t in ours.tasks if t.get("status") == "failed"]
    counts = ours.recap["h1"]
    assert f"ok={counts['ok']} " in recap and f"ignored={counts['ignored']}" in recap, (recap, counts)


@pytest.mark.parametrize("text,error", [
    ("start=5 end=1", "to count backwards make stride negative"),
    ("count=3 end=4", "either end= or count="),
    ("start=1 end=3 format=%d%d", "bad format"),
    ("begin=1", "'begin=1' is not one of"),
])
def test_a_bad_with_sequence_is_refused_when_the_playbook_loads(tmp_path, text, error):
    pb = tmp_path / "pb.yaml"
    pb.write_text(f"- hosts: all\n  gather_facts: false\n  tasks:\n    - debug: {{msg: x}}\n      with_sequence: {text}\n")
    res = run_playbook(pb, {"all": {"hosts": {"h1": {"ansible_connection": "local"}}}})
    assert res.exit_code == 4 and "with_sequence" in res.error and error in res.error, res.error


def test_unknown_loop_control_key_is_refused(tmp_path):
    pb = tmp_path / "pb.yaml"
    pb.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - debug: {msg: x}\n      loop: [1]\n"
                  "      loop_control: {lable: x}\n")
    res = run_playbook(pb, {"all": {"hosts": {"h1": {"ansible_connection": "local"}}}})
    assert res.exit_code == 4 and "'loop_control' has unknown key(s) lable" in res.error, res.error
