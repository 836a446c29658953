"""add_host and group_by as Ansible's: the new host (its groups, its variables) and the new groups are in the
in-memory inventory for the later plays, `groups` and `group_names` show them, a play's pattern naming a group
made later is no error; compared with real ansible-playbook (the same recap, new hosts included). Then the
trust rule: a host's answer never names the host the control node reaches, nor its address or connection."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.api import run_playbook
from tests.engine.playbook.ansible_side import write
from tests.helpers import required_ansible_tool

PLAYBOOK = Path(__file__).with_name("add_host_playbook.yaml")


def _inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "inv"
    inv.write_text("".join(f"{h} ansible_connection=local ansible_python_interpreter={sys.executable}\n"
                           for h in ("h", "h2")))
    return inv


def test_add_host_and_group_by_as_ansible_playbook(tmp_path):
    pb = tmp_path / "pb.yaml"
    pb.write_text(PLAYBOOK.read_text())
    inv = _inventory(tmp_path)
    proc = subprocess.run([str(required_ansible_tool("ansible-playbook")), "-i", str(inv), str(pb)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(tmp_path),
                               "ANSIBLE_LOCAL_TEMP": str(tmp_path / ".tmp")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    theirs = {h: dict(re.findall(r"(\w+)=(\d+)", rest)) for h, rest in
              re.findall(r"^(\w+)\s*:\s*(ok=.*)$", proc.stdout.rpartition("PLAY RECAP")[2], re.M)}
    ours = run_playbook(pb, inv)
    assert ours.exit_code == 0, ours.error or [(r.host, r.task, r.msg) for r in ours.results if r.status == "failed"]
    assert {h: (c["ok"], c["changed"]) for h, c in ours.recap.items()} == \
        {h: (int(c["ok"]), int(c["changed"])) for h, c in theirs.items()}
    assert set(ours.recap) == {"h", "h2", "newhost", "n1", "n2"}


ADD_FROM_AN_ANSWER = [
    {"name": "{{ out.stdout }}"},
    {"name": "fixed", "ansible_host": "{{ out.stdout }}"},
    {"name": "fixed", "ansible_connection": "{{ out.stdout }}"},
]


@pytest.mark.ssh
def test_a_host_name_or_address_from_host_data_is_refused(tmp_path, remote_host):
    pb = write(tmp_path / "pb.yaml", [
        {"hosts": "all", "gather_facts": False, "tasks": [
            {"command": "echo local", "register": "out"},
            *({"name": f"add{i}", "add_host": args, "ignore_errors": True} for i, args in enumerate(ADD_FROM_AN_ANSWER)),
        ]},
        {"hosts": "fixed", "gather_facts": False, "tasks": [{"debug": {"msg": "reached"}}]},
    ])
    res = run_playbook(str(pb), remote_host.inventory)
    for i, args in enumerate(ADD_FROM_AN_ANSWER):
        (add,) = res.find(f"add{i}")
        assert add.status == "failed" and "never names a host" in add.msg, (args, add)
    assert not any(r.host in ("fixed", "local") for r in res.results)


def test_the_control_nodes_own_answer_names_a_host(tmp_path):
    """A local host is the control node: the name it answered is its own word, as one the playbook wrote."""
    pb = write(tmp_path / "pb.yaml", [
        {"hosts": "h", "gather_facts": False, "tasks": [
            {"command": "echo n9", "register": "out"},
            {"name": "add", "add_host": {"name": "{{ out.stdout }}", "ansible_connection": "local",
                                         "ansible_python_interpreter": sys.executable}},
        ]},
        {"hosts": "n9", "gather_facts": False, "tasks": [{"debug": {"msg": "reached"}}]},
    ])
    res = run_playbook(str(pb), _inventory(tmp_path))
    assert res.exit_code == 0 and res.recap["n9"]["ok"] == 1, res.error or res.results


def test_plain_variables_from_host_data_are_data(tmp_path):
    pb = write(tmp_path / "pb.yaml", [
        {"hosts": "h", "gather_facts": False, "tasks": [
            {"command": "echo seen", "register": "out"},
            {"add_host": {"name": "h3", "seen": "{{ out.stdout }}", "ansible_connection": "local",
                          "ansible_python_interpreter": sys.executable}},
        ]},
        {"hosts": "h3", "gather_facts": False, "tasks": [{"assert": {"that": ["seen == 'seen'"]}}]},
    ])
    res = run_playbook(str(pb), _inventory(tmp_path))
    assert res.exit_code == 0 and res.recap["h3"]["ok"] == 1, res.error or res.results
