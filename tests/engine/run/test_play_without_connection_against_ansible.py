"""A play of control-node actions only (debug, fail, set_fact, assert, meta) never connects to its hosts, as
Ansible's: hosts that do not exist (`-i host1,host2`, as ansible-core's blocks target runs) are not unreachable;
a play with a module that runs on the hosts still reaches them (and reports them unreachable)."""

from __future__ import annotations

import re
import subprocess

from engine.api import run_playbook
from tests.engine.playbook.ansible_side import write
from tests.helpers import required_ansible_tool

LOCAL_ONLY = [{"hosts": "all", "gather_facts": False, "tasks": [
    {"block": [{"fail": {"msg": "x"}, "when": "inventory_hostname == 'nohost1.invalid'"}],
     "rescue": [{"debug": {"msg": "rescued"}}]},
    {"set_fact": {"a": 1}},
    {"assert": {"that": ["a == 1"]}},
]}]


def _ansible(tmp_path, pb, inv):
    proc = subprocess.run([str(required_ansible_tool("ansible-playbook")), "-i", inv, str(pb)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(tmp_path),
                               "ANSIBLE_LOCAL_TEMP": str(tmp_path / ".tmp"), "ANSIBLE_HOST_KEY_CHECKING": "0"})
    recap = {h: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", rest)} for h, rest in
             re.findall(r"^(\S+)\s*:\s*(ok=.*)$", proc.stdout.rpartition("PLAY RECAP")[2], re.M)}
    return proc.returncode, recap


def test_a_play_of_control_node_actions_does_not_reach_its_hosts(tmp_path):
    pb = write(tmp_path / "pb.yaml", LOCAL_ONLY)
    inv = tmp_path / "inv"
    inv.write_text("nohost1.invalid\nnohost2.invalid\n")
    code, theirs = _ansible(tmp_path, pb, str(inv))
    ours = run_playbook(str(pb), inv)
    assert ours.exit_code == code == 0, (theirs, ours.tasks)
    assert {h: (c["ok"], c["rescued"], c["unreachable"]) for h, c in ours.recap.items()} == \
        {h: (c["ok"], c["rescued"], c["unreachable"]) for h, c in theirs.items()}


def test_a_play_with_a_host_module_still_reaches_its_hosts(tmp_path):
    pb = write(tmp_path / "pb.yaml", [{"hosts": "all", "gather_facts": False, "tasks": [
        {"debug": {"msg": "x"}}, {"command": "true"}]}])
    inv = tmp_path / "inv"
    inv.write_text("nohost1.invalid dfp_connect_retries=1\n")
    ours = run_playbook(str(pb), inv)
    assert ours.recap["nohost1.invalid"]["unreachable"] == 1
