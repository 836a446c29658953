"""The console's lines as ansible-playbook's default callback prints them, compared with real ansible-playbook
on the same playbook (one local host): banners, status lines, debug/assert JSON, loop items, `...ignoring`,
`[ERROR]:` with its Origin lines, `included:`, `META:` (-vv), the PLAY RECAP. What modules return differs on
purpose (our fields and words), so the playbook uses only engine actions whose results match Ansible's."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
import yaml

from engine.api import run_playbook
from engine.report.console import Console
from tests.helpers import required_ansible_tool

PLAYBOOK = [{
    "name": "console", "hosts": "all", "gather_facts": False,
    "tasks": [
        {"name": "say", "debug": {"msg": "hello {{ inventory_hostname }}"}},
        {"name": "show a var", "set_fact": {"shown": [1, "two"]}},
        {"name": "the var", "debug": {"var": "shown"}},
        {"name": "not here", "debug": {"msg": "x"}, "when": "inventory_hostname == 'nope'"},
        {"name": "items", "debug": {"msg": "{{ item }}"}, "loop": ["a", "b"], "when": "item == 'a'"},
        {"name": "checked", "assert": {"that": ["shown | length == 2"]}},
        {"name": "boom", "fail": {"msg": "it broke"}, "ignore_errors": True},
        {"name": "item boom", "fail": {"msg": "bad {{ item }}"}, "loop": ["x"], "ignore_errors": True},
        {"include_tasks": "inc.yml", "loop": ["foo", "bar"]},
        {"name": "poke", "debug": {"msg": "poke"}, "changed_when": True, "notify": "noop handler"},
        {"name": "a meta", "meta": "noop"},
    ],
    "handlers": [{"name": "noop handler", "meta": "noop"}],
}]
INCLUDED = [{"debug": {"msg": "item={{ item }}"}}]
SHOWN = ("PLAY", "TASK [", "RUNNING HANDLER", "ok: [", "changed: [", "skipping: [", "fatal: [", "failed: [",
         "...ignoring", "included: ", "META: ", "[ERROR]: ", "Origin: ", "    ", "}", "h1 ")


def comparable(out: str) -> list[str]:
    """The lines both tools print alike: the callback's own, the run's seconds and Ansible's banners' lines kept."""
    lines = out.splitlines()
    keep, in_origin = [], False
    for line in lines:
        if line.startswith("Origin: "):
            in_origin = True
        elif in_origin and not line:
            in_origin = False
        if line.startswith(SHOWN) or in_origin:
            keep.append(line.rstrip())
    return keep


@pytest.fixture
def book(tmp_path: Path) -> tuple[Path, Path]:
    pb = tmp_path / "pb.yml"
    pb.write_text(yaml.safe_dump(PLAYBOOK, sort_keys=False))
    (tmp_path / "inc.yml").write_text(yaml.safe_dump(INCLUDED))
    inv = tmp_path / "inv.ini"
    inv.write_text("h1 ansible_connection=local ansible_python_interpreter=/usr/bin/python3\n")
    return pb, inv


@pytest.mark.parametrize("verbose", [0, 2])
def test_the_console_prints_what_ansible_playbook_prints(book, verbose):
    pb, inv = book
    tool = required_ansible_tool("ansible-playbook")
    flags = ["-" + "v" * verbose] if verbose else []
    proc = subprocess.run([str(tool), "-i", str(inv), str(pb), *flags], capture_output=True, text=True, timeout=300,
                          cwd=pb.parent, env={"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(pb.parent),
                                              "LC_ALL": "C.UTF-8", "ANSIBLE_LOCAL_TEMP": str(pb.parent / ".tmp")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    buf = io.StringIO()
    res = run_playbook(str(pb), str(inv), console=Console(stream=buf, verbose=verbose))
    assert res.exit_code == 0, buf.getvalue()
    theirs = [line for line in comparable(proc.stdout) if not line.startswith("task path: ")]
    assert comparable(buf.getvalue()) == theirs, buf.getvalue()


def test_a_secret_stays_masked_in_the_json(tmp_path: Path):
    pb = tmp_path / "pb.yml"
    pb.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "vars": {"api_password": "s3cr3t-value"},
                                   "tasks": [{"debug": {"var": "api_password"}},
                                             {"fail": {"msg": "no {{ api_password }}"}, "ignore_errors": True}]}]))
    buf = io.StringIO()
    run_playbook(str(pb), {"all": {"hosts": {"h1": {"ansible_connection": "local"}}}},
                 console=Console(stream=buf, verbose=3))
    out = buf.getvalue()
    assert "s3cr3t-value" not in out and '"api_password": "********"' in out and "fatal: [h1]: FAILED! =>" in out, out
