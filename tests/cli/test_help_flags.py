"""`-h` is help on every command, as in Invoke, Fabric and ansible-playbook; `-H` names the host, as Fabric
spells it. Before, `invoke provision -h` answered "Flag host needed value" (-h was --host's short flag), and
`invoke play -h` looked for a playbook named '-h'. Through the real `invoke` CLI."""

from __future__ import annotations

import pytest

from tasks import ns
from tests.cli.helpers import invoke


@pytest.mark.parametrize("command", sorted(ns.task_names))
def test_dash_h_prints_the_commands_help(command):
    code, out = invoke(command, "-h")
    assert code == 0, out
    assert out.startswith(f"Usage: inv[oke] [--core-opts] {command} "), out
    assert "needed value" not in out and "not found" not in out, out


def test_dash_capital_h_names_the_host():
    code, out = invoke("provision", "-H", "local", "--list-hosts")
    assert code == 0, out
    assert "hosts (1):" in out and "local" in out, out
    code, out = invoke("provision", "-h")
    assert "-H STRING, --host=STRING" in out, out
