"""--list-hosts, --list-tasks, --list-tags and --syntax-check, through the real `invoke` CLI and real
`ansible-playbook` on the same playbooks and inventory: the same plays, patterns, hosts, tasks with their tags
(after --limit, --tags and --skip-tags), the same exit codes; and no host is touched by either.

Where they differ on purpose: Ansible prints a play's hosts in no fixed order (compared as sets), and our
--syntax-check also runs the checks a run makes before touching a host (an undefined variable is an error
there, where Ansible's syntax check passes it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.cli.helpers import invoke
from tests.engine.playbook.ansible_side import real_ansible_playbook

PLAYBOOK = [
    {"name": "First play", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "one", "ansible.builtin.debug": {"msg": "hi"}, "tags": ["a", "b"]},
        {"name": "two", "command": {"argv": ["true"]}},
        {"block": [{"name": "three", "debug": {"msg": "x"}}], "tags": ["c"]},
        {"debug": {"msg": "unnamed"}, "tags": ["always"]},
    ]},
    {"name": "Second", "hosts": "web", "gather_facts": False, "tasks": [
        {"name": "four", "debug": {"msg": "y"}, "tags": ["a"]},
    ]},
]
INVENTORY = {"all": {"hosts": {"h1": {"ansible_connection": "local"}},
                     "children": {"web": {"hosts": {"h2": {"ansible_connection": "local"},
                                                    "h3": {"ansible_connection": "local"}}}}}}


@pytest.fixture()
def files(tmp_path) -> tuple[Path, Path]:
    pb, inv = tmp_path / "pb.yaml", tmp_path / "inv.yaml"
    pb.write_text(yaml.safe_dump(PLAYBOOK, sort_keys=False))
    inv.write_text(yaml.safe_dump(INVENTORY, sort_keys=False))
    return pb, inv


def run_ansible(pb: Path, inv: Path, *flags: str) -> tuple[int, str]:
    proc = real_ansible_playbook(pb, inv, timeout=120, args=flags)
    return proc.returncode, proc.stdout


def parsed(text: str) -> list[dict]:
    """Each play's header, pattern, hosts (a set), task lines and TASK TAGS line, from either tool's output."""
    plays: list[dict] = []
    for line in text.splitlines():
        if m := re.match(r"  play #(\d+) \((.*)\): (.*)\tTAGS: (.*)$", line):
            plays.append({"play": m.groups(), "hosts": set(), "tasks": [], "tags": None, "pattern": None})
        elif not plays:
            continue
        elif m := re.match(r"    pattern: (.*)$", line):
            plays[-1]["pattern"] = m.group(1)
        elif re.match(r"      TASK TAGS: ", line):
            plays[-1]["tags"] = line.strip()
        elif m := re.match(r"      (.*)\tTAGS: (.*)$", line):
            plays[-1]["tasks"].append(m.groups())
        elif m := re.match(r"      (\S+)$", line):
            plays[-1]["hosts"].add(m.group(1))
    return plays


@pytest.mark.parametrize("flags", [
    ["--list-hosts"], ["--list-tasks"], ["--list-tags"], ["--list-hosts", "--list-tasks", "--list-tags"],
    ["--list-tasks", "-t", "a"], ["--list-tasks", "--skip-tags", "b"], ["--list-hosts", "-l", "h2"],
])
def test_listings_match_ansible_playbook(files, flags):
    pb, inv = files
    ours_code, ours = invoke("play", str(pb), "-i", str(inv), *flags)
    theirs_code, theirs = run_ansible(pb, inv, *flags)
    assert ours_code == theirs_code == 0, (ours, theirs)
    assert parsed(ours) == parsed(theirs), f"ours:\n{ours}\nansible-playbook:\n{theirs}"
    assert len(parsed(ours)) == 2


def test_syntax_check_passes_and_refuses_like_ansible_playbook(files, tmp_path):
    pb, inv = files
    ours_code, ours = invoke("play", str(pb), "-i", str(inv), "--syntax-check")
    theirs_code, theirs = run_ansible(pb, inv, "--syntax-check")
    assert ours_code == theirs_code == 0 and f"playbook: {pb}" in ours and "playbook: " in theirs, (ours, theirs)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                    "tasks": [{"name": "x", "no_such_module_here": {"a": 1}}]}]))
    ours_code, ours = invoke("play", str(bad), "-i", str(inv), "--syntax-check")
    theirs_code, _ = run_ansible(bad, inv, "--syntax-check")
    assert ours_code == theirs_code == 4, ours
    assert "unknown module 'no_such_module_here'" in ours and "Traceback" not in ours


def test_our_syntax_check_also_catches_an_undefined_variable_and_touches_no_host(files, tmp_path):
    pb, inv = files
    made = tmp_path / "made"
    pb.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "would make", "file": {"path": str(made), "state": "directory"}},
        {"name": "undefined", "debug": {"msg": "{{ nowhere_defined }}"}}]}]))
    code, out = invoke("play", str(pb), "-i", str(inv), "--syntax-check")
    assert code == 4 and "variable 'nowhere_defined' is undefined" in out and not made.exists(), out
