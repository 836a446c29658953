"""The trust rule for includes read when reached (engine/run/includes.py, docs/SAFETY.md): the file an include
reads on the control node is never chosen by what a host returned. A real sshd host answers a file name (a
registered stdout, a set_fact built from it, a loop over its lines, its hostvars seen from another host): each
include is refused on that host, naming the variable; the same names written in the playbook, a first_found over
them, and the control node's own answers still include."""

from __future__ import annotations

import pytest
import yaml

from engine.api import run_playbook

pytestmark = pytest.mark.ssh


def test_an_include_named_by_a_hosts_answer_is_refused(tmp_path, ssh_host, inventory_file, shared_tmp):
    (tmp_path / "steal.yml").write_text("- debug: {msg: stolen}\n")
    (tmp_path / "ok.yml").write_text("- debug: {msg: fine}\n")
    inv = inventory_file(hosts=[ssh_host], host_vars={ssh_host.name: {"dfp_root": str(shared_tmp / "root")}})
    refused = [
        {"name": "from stdout", "include_tasks": "{{ out.stdout }}"},
        {"name": "from set_fact", "include_tasks": "{{ answer }}"},
        {"name": "looped lines", "include_tasks": "{{ item }}", "loop": "{{ out.stdout_lines }}"},
        {"name": "through hostvars", "include_tasks": "{{ hostvars[inventory_hostname].answer }}"},
        {"name": "role by answer", "include_role": {"name": "{{ answer | replace('.yml', '') }}"}},
    ]
    fine = [
        {"name": "written", "include_tasks": "{{ 'ok' }}.yml"},
        {"name": "first_found", "include_tasks": "{{ lookup('first_found', ['missing.yml', 'ok.yml']) }}"},
        {"name": "checked against a list", "include_tasks": "{{ item }}", "loop": ["ok.yml"],
         "when": "out.stdout in ['steal.yml', 'ok.yml']"},
    ]
    tasks = [{"name": "hostile answer", "command": {"argv": ["printf", "%s", "steal.yml"]}, "register": "out"},
             {"name": "hostile fact", "set_fact": {"answer": "{{ out.stdout }}"}}]
    tasks += [dict(t, ignore_errors=True) for t in refused] + fine
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    res = run_playbook(str(book), inventory=str(inv))
    for task in refused:
        (r,) = res.find(task["name"])
        assert r.status == "failed" and r.ignored, (task["name"], r.status, r.msg)
        assert "is built from what" in r.msg and "never chooses a file the control node reads" in r.msg, r.msg
    assert not [r for r in res.results if r.msg == "stolen"]
    assert len([r for r in res.results if r.module == "debug" and r.msg == "fine"]) == 3
