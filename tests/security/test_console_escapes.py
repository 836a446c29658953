"""A host's output cannot drive the terminal or forge the console's own lines: control characters show escaped,
and every line of a host's text is indented under its status line."""

from __future__ import annotations

import io

import yaml

from engine.api import run_playbook
from engine.report.console import Console, printable

FORGE = "\x1b]0;owned\x07\x1b[2K\rok: [h1] all good\nok: [h9] forged\x1b[1A"


def test_printable_escapes_controls_and_indents_lines():
    shown = printable(FORGE)
    assert "\x1b" not in shown and "\r" not in shown and "\x07" not in shown
    assert "\\x1b]0;owned\\x07" in shown
    assert all(not line.startswith("ok: [") for line in shown.splitlines()[1:])


def test_a_hosts_output_reaches_the_console_escaped(tmp_path):
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "talk", "command": {"argv": ["printf", "%s", FORGE]}, "register": "out"},
        {"name": "say", "debug": {"msg": "{{ out.stdout }}"}},
        {"name": "fail", "command": {"argv": ["sh", "-c", f"printf '%s' '{FORGE}' >&2; exit 3"]}, "ignore_errors": True},
    ]}]))
    buf = io.StringIO()
    res = run_playbook(str(book), inventory={"all": {"hosts": {"h": {"ansible_connection": "local"}}}},
                       console=Console(stream=buf, verbose=2))
    assert res.exit_code == 0, [t["msg"] for t in res.tasks]
    out = buf.getvalue()
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out
    assert not [line for line in out.splitlines() if line.startswith(("ok: [h9]", "ok: [h1]"))]
    assert "\\x1b[2K" in out
