"""A play on `localhost` (or 127.0.0.1) when the inventory names no such host runs on the control node, as Ansible's
implicit localhost: `ansible_connection: local`, the control node's python, the 'all' group's variables, in no
group and not part of `all`; the same host a task delegated to localhost reaches."""

from __future__ import annotations

import sys

import yaml

from engine.api import run_playbook
from engine.inventory.manager import Inventory

INVENTORY = {"all": {"vars": {"greeting": "hi"}, "hosts": {"other": {"ansible_connection": "local"}}}}


def _run(tmp_path, plays, **kw):
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(INVENTORY))
    (tmp_path / "pb.yaml").write_text(yaml.safe_dump(plays, sort_keys=False))
    return run_playbook(str(tmp_path / "pb.yaml"), inventory=str(tmp_path / "inv.yaml"), **kw)


def test_a_play_on_localhost_runs_on_the_control_node(tmp_path):
    marker = tmp_path / "made-by-localhost"
    plays = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "touch", "file": {"path": str(marker), "state": "touch"}},
        {"name": "who", "debug": {"msg": "{{ inventory_hostname }} {{ ansible_connection }} {{ greeting }} "
                                          "{{ group_names | length }} {{ ansible_python_interpreter }}"}},
        {"name": "delegated", "debug": {"msg": "d"}, "delegate_to": "localhost"}]}]
    res = _run(tmp_path, plays)
    assert res.exit_code == 0, res.tasks
    assert marker.exists()
    assert next(r.msg for r in res.find("who", "localhost")) == f"localhost local hi 0 {sys.executable}"
    assert set(res.recap) == {"localhost"}


def test_all_does_not_include_the_implicit_localhost(tmp_path):
    plays = [{"hosts": "all", "gather_facts": False, "tasks": [{"name": "t", "debug": {"msg": "x"}}]},
             {"hosts": "127.0.0.1,other", "gather_facts": False, "tasks": [{"name": "u", "debug": {"msg": "y"}}]}]
    res = _run(tmp_path, plays)
    assert res.exit_code == 0, res.tasks
    assert {r.host for r in res.find("t")} == {"other"}
    assert {r.host for r in res.find("u")} == {"127.0.0.1", "other"}


def test_an_inventory_localhost_is_used_as_written(tmp_path):
    inv = Inventory(data={"all": {"hosts": {"localhost": {"ansible_connection": "local", "x": 1}}}})
    assert inv.select("localhost") == ["localhost"] and inv.host("localhost").vars["x"] == 1
    assert not inv.is_implicit("localhost")
    assert inv.select("all") == ["localhost"]


def test_the_implicit_localhost_is_one_host_and_outside_all():
    inv = Inventory(data=INVENTORY)
    assert inv.select("localhost") == ["localhost"] and inv.select("all") == ["other"]
    assert inv.host("localhost") is inv.delegate_host("localhost")
    assert inv.is_implicit("localhost") and inv.host("localhost").groups == []
