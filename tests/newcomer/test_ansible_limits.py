"""README's "Your Ansible playbooks", as a newcomer meets it: each construct README says is refused at load is
refused (exit 4, the message naming it, the playbook's first task not run), through the real CLI on the local
host; and what README says runs, but not as in Ansible, does so. When one of them starts to run (the Ansible
semantics work), its case here fails: move it in README's lists and docs/ANSIBLE.md, and drop it here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import invoke

INVENTORY = "all:\n  hosts:\n    local: {ansible_connection: local}\n"


def play(tmp_path: Path, body: str, files: dict | None = None) -> tuple[int, str, Path]:
    """Run a playbook whose play has `body` (YAML lines at the play's indentation) after a first task that
    would create a folder (the marker); returns (exit code, output, marker)."""
    marker = tmp_path / "first-task-ran"
    for rel, text in (files or {}).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    head = ("- hosts: all\n  gather_facts: false\n  pre_tasks:\n"
            f"    - file: {{path: '{marker}', state: directory}}\n")
    (tmp_path / "pb.yaml").write_text(head + body)
    code, out = invoke("play", str(tmp_path / "pb.yaml"), "-i", str(tmp_path / "inv.yaml"))
    return code, out, marker


TASK = "  tasks:\n    - {}\n"

REFUSED = {
    # `args:` as a key=value string (Ansible refuses it too)
    "args as key=value": (TASK.format("debug:\n      args: msg=hi"), "'args' must be a mapping"),
    # play keywords
    "strategy debug": ("  strategy: debug\n" + TASK.format("debug: {msg: a}"),
                       "'strategy' must be one of linear, free"),
    "module_defaults": ("  module_defaults: {}\n" + TASK.format("debug: {msg: a}"),
                        "unknown play keyword(s) module_defaults"),
    # task keywords
    "async": (TASK.format("command: 'true'\n      async: 10\n      poll: 1"), "unknown task keyword or module 'async'"),
    "throttle": (TASK.format("debug: {msg: a}\n      throttle: 1"), "unknown task keyword or module 'throttle'"),
    "with_flattened": (TASK.format("debug: {msg: a}\n      with_flattened: [[1], [2]]"), "'with_flattened'"),
    "loop_control unknown key": (TASK.format("debug: {msg: a}\n      loop: [1]\n      loop_control: {loop: x}"),
                                 "'loop_control' has unknown key(s) loop"),
    # modules
    "git": (TASK.format("git: {repo: 'https://x', dest: /tmp/x}"), "unknown module 'git'"),
    "another collection": (TASK.format("community.general.ufw: {state: enabled}"), "community.general"),
    # filters, facts, localhost (a lookup we lack fails its task when it renders, as in Ansible)
    "password_hash": (TASK.format('debug: {msg: "{{ \'a\' | password_hash }}"}'), "No filter named 'password_hash'"),
    "json_query": (TASK.format('debug: {msg: "{{ {} | json_query(\'a\') }}"}'), "No filter named 'json_query'"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_readme_says_is_refused_is_refused_before_the_first_task(tmp_path, name):
    body, words = REFUSED[name]
    code, out, marker = play(tmp_path, body, {"v.yml": "x: 1\n", "t_a.yml": "- debug: {msg: a}\n",
                                              "roles/r/tasks/main.yml": "- debug: {msg: r}\n"})
    assert code == 4, out
    assert words in out and "Traceback" not in out, out
    assert not marker.exists(), "refused at load: the playbook's first task must not have run"
