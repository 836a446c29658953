"""--start-at-task as ansible-playbook's: the run starts at the first task of that name (exactly, as a glob, or
as 'ROLE : NAME'), blocks opened; the plays before it are not run, nor its play's facts; every task after it runs;
a name no task has is refused before any host is touched."""

from __future__ import annotations

import yaml

from engine.api import run_playbook
from tests.cli.helpers import invoke

INV = {"all": {"hosts": {"h": {"ansible_connection": "local"}}}}


def book(tmp_path):
    role = tmp_path / "roles" / "r" / "tasks" / "main.yml"
    role.parent.mkdir(parents=True)
    role.write_text(yaml.safe_dump([{"name": "step", "debug": {"msg": "role step"}}]))
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([
        {"name": "one", "hosts": "all", "tasks": [{"name": "first", "debug": {"msg": "1"}}]},
        {"name": "two", "hosts": "all", "roles": ["r"], "tasks": [
            {"name": "second", "debug": {"msg": "2"}},
            {"block": [{"name": "third", "debug": {"msg": "3"}}, {"name": "step", "debug": {"msg": "4"}}]}]},
        {"name": "three", "hosts": "all", "gather_facts": False, "tasks": [{"name": "last", "debug": {"msg": "5"}}]},
    ], sort_keys=False))
    return str(path)


def ran(res):
    return [t["msg"] for t in res.tasks]


def test_the_run_starts_at_the_named_task(tmp_path):
    path = book(tmp_path)
    assert ran(run_playbook(path, inventory=INV, start_at_task="third")) == ["3", "4", "5"]
    assert ran(run_playbook(path, inventory=INV, start_at_task="sec*")) == ["2", "3", "4", "5"]
    assert ran(run_playbook(path, inventory=INV, start_at_task="r : step")) == ["role step", "2", "3", "4", "5"]
    full = run_playbook(path, inventory=INV)
    assert [t["task"] for t in full.tasks][:2] == ["Gathering facts", "first"]


def test_a_name_no_task_has_is_refused_through_the_cli(tmp_path):
    path = book(tmp_path)
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(INV))
    code, out = invoke("play", path, "-i", str(tmp_path / "inv.yaml"), "--start-at-task", "nothing")
    assert code == 4 and "--start-at-task 'nothing' matches no task" in out and "Traceback" not in out, out
    code, out = invoke("play", path, "-i", str(tmp_path / "inv.yaml"), "--start-at-task", "last")
    assert code == 0 and "TASK [last]" in out and "TASK [first]" not in out, out
