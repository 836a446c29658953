"""`delegate_to` and `delegate_facts` as in Ansible, against real sshd hosts and the implicit localhost: the module
runs on the delegate (its SSH_CONNECTION names the delegate's address; localhost has none and runs as the control
node's user), rendered with the delegating host's variables, its result registered and counted there; set_fact
sets the delegate's variables only with delegate_facts; a delegate outside the play is reached on first use and
stays out of the recap; a name outside the inventory or an unreachable delegate fails the task, naming it."""

from __future__ import annotations

import getpass

import pytest
import yaml

from engine.api import run_playbook

pytestmark = pytest.mark.ssh

# the host's name as rendered, the SSH server address the command ran behind (none: not over ssh), its user
ECHO = "set -- ${SSH_CONNECTION:-- - none}; echo {{ inventory_hostname }} $3 $(id -un)"


def book(tmp_path, tasks, hosts="h1:h2", name="pb.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump([{"hosts": hosts, "gather_facts": False, "tasks": tasks}], sort_keys=False))
    return str(path)


@pytest.fixture
def trio(ssh_hosts, inventory_file, shared_tmp):
    host_vars = {h.name: {"dfp_root": str(shared_tmp / h.name)} for h in ssh_hosts[:3]}
    return inventory_file(hosts=ssh_hosts[:3], host_vars=host_vars), {h.name: h for h in ssh_hosts[:3]}


def run(path, inv, **kw):
    return run_playbook(path, inventory=str(inv), **kw)


def msg_of(res, task: str, host: str = "h1") -> str:
    return next(r.msg for r in res.find(task, host))


def test_the_module_runs_on_the_delegate_with_the_delegating_hosts_variables(tmp_path, trio):
    inv, hosts = trio
    tasks = [{"name": "on h2", "command": {"argv": ["sh", "-c", ECHO]}, "delegate_to": "h2", "register": "out"},
             {"name": "on localhost", "command": {"argv": ["sh", "-c", ECHO]}, "delegate_to": "localhost",
              "register": "loc"},
             {"name": "seen", "debug": {"msg": "{{ out.stdout.split()[1] }} {{ loc.stdout.split()[1] }}"}}]
    res = run(book(tmp_path, tasks), inv)
    assert res.exit_code == 0, res.tasks
    h2 = hosts["h2"]
    assert {r.host: r.delegated_to for r in res.find("on h2")} == {"h1": "h2", "h2": None}
    assert next(t for t in res.tasks if t["task"] == "on localhost")["delegated_to"] == "localhost"
    seen = {r.host: r.msg for r in res.find("seen")}
    # each host's register holds what ran on h2 (its address) and on the control node (no SSH_CONNECTION)
    assert seen == {"h1": f"{h2.address} none", "h2": f"{h2.address} none"}, seen
    assert set(res.recap) == {"h1", "h2"}  # the delegates are not hosts of the play's recap


def test_rendered_name_user_and_address_of_a_delegated_command(tmp_path, trio):
    inv, hosts = trio
    tasks = [{"name": "who", "command": {"argv": ["sh", "-c", ECHO]}, "delegate_to": "{{ target }}", "register": "w"},
             {"name": "show", "debug": {"msg": "{{ w.stdout }}"}}]
    res = run(book(tmp_path, tasks, hosts="h1"), inv, extra_vars={"target": "h3"})
    assert res.exit_code == 0, res.tasks
    h3 = hosts["h3"]
    shown = msg_of(res, "show").split()
    assert shown[:2] == ["h1", h3.address] and shown[-1] == h3.user  # h1's variables, h3's connection
    assert set(res.recap) == {"h1"}  # h3, outside the play, was reached for the task only
    res = run(book(tmp_path, tasks, hosts="h1"), inv, extra_vars={"target": "localhost"})
    shown = msg_of(res, "show").split()
    assert shown == ["h1", "none", getpass.getuser()]


def test_a_loop_delegates_each_item_to_its_own_host(tmp_path, trio):
    inv, hosts = trio
    tasks = [{"name": "each", "command": {"argv": ["sh", "-c", ECHO]},
              "delegate_to": "{{ item }}", "loop": ["h2", "h3", "localhost"], "register": "each"},
             {"name": "addresses", "debug": {"msg": "{{ each.results | map(attribute='stdout') | join(';') }}"}}]
    res = run(book(tmp_path, tasks, hosts="h1"), inv)
    assert res.exit_code == 0, res.tasks
    addresses = [line.split()[1] for line in msg_of(res, "addresses").split(";")]
    assert addresses == [hosts["h2"].address, hosts["h3"].address, "none"]


def test_delegate_facts_sets_the_delegates_variables(tmp_path, trio):
    inv, _ = trio
    tasks = [{"name": "for h3", "set_fact": {"given": "from {{ inventory_hostname }}"}, "delegate_to": "h3",
              "delegate_facts": True},
             {"name": "mine", "set_fact": {"own": "yes"}, "delegate_to": "h3"},
             {"name": "read", "debug": {"msg": "{{ hostvars['h3'].given }} {{ own }} "
                                               "{{ hostvars['h3'].own | default('unset') }} {{ given | default('unset') }}"}}]
    res = run(book(tmp_path, tasks, hosts="h1"), inv)
    assert res.exit_code == 0, res.tasks
    assert msg_of(res, "read") == "from h1 yes unset unset"
    to_local = [{"name": "for localhost", "set_fact": {"seen": 1}, "delegate_to": "localhost", "delegate_facts": True},
                {"name": "known", "debug": {"msg": "{{ 'localhost' in hostvars }} {{ hostvars['localhost'].seen }}"}}]
    res = run(book(tmp_path, to_local, hosts="h1"), inv)
    assert res.exit_code == 0 and msg_of(res, "known") == "True 1", res.tasks


def test_run_once_with_delegate_to_runs_one_command_on_the_delegate(tmp_path, trio, shared_tmp):
    inv, _ = trio
    mark = shared_tmp / "once.log"
    tasks = [
        {"name": "once", "command": {"argv": ["sh", "-c", f"echo {{{{ inventory_hostname }}}} >> {mark}"]},
         "run_once": True, "delegate_to": "localhost"}]
    res = run(book(tmp_path, tasks), inv)
    assert res.exit_code == 0, res.tasks
    assert mark.read_text() == "h1\n"
    assert mark.owner() == getpass.getuser()  # written by the control node's user, not the ssh hosts' one


def test_copy_delegated_to_localhost_is_idempotent(tmp_path, trio, shared_tmp):
    inv, _ = trio
    dest = shared_tmp / "local-copy"
    tasks = [{"name": "put", "copy": {"dest": f"{dest}/{{{{ inventory_hostname }}}}.txt", "content": "x\n"},
              "delegate_to": "localhost"}]
    path = book(tmp_path, [{"name": "dir", "file": {"path": str(dest), "state": "directory"},
                            "delegate_to": "localhost", "run_once": True}, *tasks])
    first = run(path, inv)
    assert first.exit_code == 0, first.tasks
    assert sorted(p.name for p in dest.iterdir()) == ["h1.txt", "h2.txt"]
    assert dest.owner() == getpass.getuser()  # made by the control node, not by the ssh hosts' user
    second = run(path, inv)
    assert second.exit_code == 0 and sum(c["changed"] for c in second.recap.values()) == 0, second.recap


def test_a_name_outside_the_inventory_fails_the_task_naming_it(tmp_path, trio):
    inv, _ = trio
    tasks = [{"name": "nowhere", "command": {"argv": ["true"]}, "delegate_to": "{{ 'db9' }}"}]
    res = run(book(tmp_path, tasks, hosts="h1"), inv)
    assert res.exit_code == 2
    msg = msg_of(res, "nowhere")
    assert "delegate_to 'db9' is not a host of the inventory" in msg and "localhost" in msg, msg


def test_an_unreachable_delegate_makes_the_delegating_host_unreachable(tmp_path, trio):
    inv, _ = trio
    data = yaml.safe_load(inv.read_text())
    data["all"]["hosts"]["gone"] = {"ansible_host": "127.0.0.1", "ansible_port": 9, "dfp_connect_retries": 1}
    inv.write_text(yaml.safe_dump(data))
    tasks = [{"name": "to gone", "command": {"argv": ["true"]}, "delegate_to": "gone"},
             {"name": "after", "debug": {"msg": "never"}}]
    res = run(book(tmp_path, tasks, hosts="h1"), inv)
    assert res.exit_code == 3, res.tasks
    h1 = [t for t in res.tasks if t["host"] == "h1"]
    assert [t["status"] for t in h1] == ["unreachable"] and "delegate_to gone (for h1)" in h1[0]["msg"], h1
    assert set(res.recap) == {"h1"}


@pytest.mark.parametrize("value", [5, "", ["h2"]])
def test_delegate_to_must_be_a_host_name(tmp_path, value):
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "x", "command": {"argv": ["true"]}, "delegate_to": value}]}]))
    res = run_playbook(str(path), inventory={"all": {"hosts": {"a": {"ansible_connection": "local"}}}})
    assert res.exit_code == 4 and "'delegate_to' must be a host name of the inventory" in res.error, res.error
