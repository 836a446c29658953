"""`meta: clear_host_errors` as Ansible's: a host that failed in a block whose always clears the errors goes on
with the play after the block (the shape of ansible-core's blocks target, 72725.yml); compared with real
ansible-playbook (exit code and recap)."""

from __future__ import annotations

import re
import subprocess
import sys

from engine.api import run_playbook
from tests.engine.playbook.ansible_side import write
from tests.helpers import required_ansible_tool

PLAY = [{"hosts": "all", "gather_facts": False, "tasks": [
    {"block": [
        {"block": [
            {"name": "h1 fails", "fail": {"msg": "x"}, "when": "inventory_hostname == 'h1'"},
            {"set_fact": {"only_h2": True}},
        ]},
        {"name": "should not fail", "fail": {"msg": "y"}, "when": "only_h2 is not defined"},
    ], "always": [{"block": [{"meta": "clear_host_errors"}]}]},
    {"name": "both go on", "debug": {"msg": "after"}},
    {"assert": {"that": ["only_h2 is defined"]}, "when": "inventory_hostname == 'h2'"},
]}]


def _recap(stdout: str) -> dict:
    return {h: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", rest)} for h, rest in
            re.findall(r"^(\w+)\s*:\s*(ok=.*)$", stdout.rpartition("PLAY RECAP")[2], re.M)}


def test_clear_host_errors_lets_the_failed_host_go_on_as_ansible(tmp_path):
    pb = write(tmp_path / "pb.yaml", PLAY)
    inv = tmp_path / "inv"
    inv.write_text("".join(f"{h} ansible_connection=local ansible_python_interpreter={sys.executable}\n"
                           for h in ("h1", "h2")))
    proc = subprocess.run([str(required_ansible_tool("ansible-playbook")), "-i", str(inv), str(pb)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(tmp_path),
                               "ANSIBLE_LOCAL_TEMP": str(tmp_path / ".tmp")})
    theirs = _recap(proc.stdout)
    ours = run_playbook(str(pb), inv)
    assert ours.exit_code == proc.returncode, (proc.stdout[-3000:], ours.tasks)
    assert {h: (c["ok"], c["failed"]) for h, c in ours.recap.items()} == \
        {h: (c["ok"], c["failed"]) for h, c in theirs.items()}
    assert theirs["h1"]["failed"] == 1 and theirs["h1"]["ok"] == 1  # h1 failed, then ran "both go on"


def test_clear_host_errors_in_an_always_lifts_an_any_errors_fatal_stop(tmp_path):
    """blocks/main.yml: a fatal failure in a nested block, its always clears the errors: the play goes on."""
    pb = write(tmp_path / "pb.yaml", [{"hosts": "all", "gather_facts": False, "strategy": "host_pinned", "tasks": [
        {"block": [{"block": [{"fail": {"msg": "x"}}], "any_errors_fatal": True}],
         "always": [{"meta": "clear_host_errors"}]},
        {"name": "after", "debug": {"msg": "after"}},
    ]}])
    inv = tmp_path / "inv"
    inv.write_text(f"h ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    res = run_playbook(str(pb), inv)
    assert res.exit_code == 0, res.tasks
    assert [r["status"] for r in res.tasks if r["task"] == "after"] == ["ok"]


def test_ansible_failed_task_names_the_action_as_ansible(tmp_path):
    """blocks/unsafe_failed_task.yml: the rescue reads ansible_failed_task.action."""
    from tests.engine.playbook.ansible_side import same_as_ansible

    pb = write(tmp_path / "pb" / "pb.yaml", [{"hosts": "all", "gather_facts": False, "vars": {"data": {}}, "tasks": [
        {"block": [{"name": "template error", "debug": {"msg": "{{ data.value }}"}}],
         "rescue": [{"debug": {"msg": "{{ ansible_failed_task.action }} {{ ansible_failed_task.name }}"}}]}]}])
    code, _, counts, said = same_as_ansible(pb)
    assert code == 0 and said[-1] == "debug template error", said
