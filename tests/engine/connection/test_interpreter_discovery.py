"""Python interpreter discovery as Ansible's `auto` (ansible_python_interpreter unset or auto): the system's
python3 first, then the usual places, on ssh hosts and on `ansible_connection: local` hosts alike, so a worker
started through sudo as another user (nobody) runs a python that user can read; Ansible's implicit localhost
keeps the control node's own python; a given interpreter is used as given."""

from __future__ import annotations

import shutil
import sys

import pytest
import yaml

from engine.api import run_playbook
from engine.connection.transport import PYTHON_CANDIDATES

SYSTEM_PYTHON = next(filter(None, map(shutil.which, PYTHON_CANDIDATES)), None)


def book(tmp_path, tasks, hosts="all"):
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([{"hosts": hosts, "gather_facts": True, "tasks": tasks}], sort_keys=False))
    return str(path)


def python_of(res, host):
    return next(r.result["facts"]["python"]["executable"] for r in res.find("Gathering facts", host))


@pytest.mark.skipif(shutil.which("sudo") is None, reason="needs sudo")
def test_a_local_host_finds_the_system_python_and_becomes_nobody(tmp_path):
    inv = {"all": {"hosts": {"l": {"ansible_connection": "local"}}}}
    tasks = [{"name": "who", "command": {"argv": ["id", "-un"]}, "become": True, "become_user": "nobody",
              "register": "who"}]
    res = run_playbook(book(tmp_path, tasks), inventory=inv)
    assert res.exit_code == 0, res.tasks
    assert res.registered["l"]["who"]["stdout"].strip() == "nobody"
    assert python_of(res, "l") == SYSTEM_PYTHON != sys.executable


@pytest.mark.ssh
@pytest.mark.parametrize("given", [None, "auto", "auto_silent"])
def test_an_ssh_host_finds_the_first_python_of_the_usual_places(tmp_path, ssh_hosts, inventory_file, given):
    host_vars = {"h1": {"ansible_python_interpreter": given}} if given else {}
    inv = inventory_file(hosts=ssh_hosts[:1], host_vars=host_vars)
    res = run_playbook(book(tmp_path, [{"name": "x", "debug": {"msg": "x"}}]), inventory=str(inv))
    assert res.exit_code == 0, res.tasks
    assert python_of(res, "h1") == SYSTEM_PYTHON


def test_the_implicit_localhost_keeps_the_control_nodes_python_and_a_given_one_is_used(tmp_path):
    inv = {"all": {"hosts": {"l": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}
    tasks = [{"name": "there", "facts": {}, "delegate_to": "localhost", "register": "there"}]
    res = run_playbook(book(tmp_path, tasks), inventory=inv)
    assert res.exit_code == 0, res.tasks
    assert python_of(res, "l") == sys.executable
    assert res.registered["l"]["there"]["facts"]["python"]["executable"] == sys.executable
