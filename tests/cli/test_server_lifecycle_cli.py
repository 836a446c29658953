"""What the serving commands say, through the real `invoke` CLI on `local`: where the server listens and how to
talk to it (after restart-server, as after provision, and in `invoke status`), why restart-server starts it,
and that a torn-down host is a normal state (`invoke status` exits 3, not running, as systemctl says of a
stopped unit; 4 stays for a host never provisioned). The stand-in server (tests/fakes/fake_vllm.py) is started
through the vllm-service role, as tests/cli/test_status.py does."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.cli.helpers import invoke
from tests.fakes.served import PLAYBOOKS, SERVICE, msgs, paths_of, server_vars
from tests.fakes.vllm_processes import kill_leftovers
from tests.helpers import play


def cli(command: str, inv, *more: str) -> tuple[int, str]:
    return invoke(command, "-H", "local", "-i", str(inv), *more)


def endpoint_line(out: str) -> str:
    """The line that says where the server listens; exactly one."""
    lines = [line for line in out.splitlines() if "vLLM listens on" in line]
    assert len(lines) == 1, out
    return lines[0]


def test_a_teardown_of_a_host_never_provisioned_leaves_it_unknown_4(tmp_path, inventory_file):
    inv = inventory_file(local=True, host_vars={"local": {"dfp_root": str(tmp_path / "nothing-here"),
                                                          "nvidia_smi": "/nonexistent/nvidia-smi"}})
    code, out = cli("teardown", inv)
    assert code == 0, out
    code, out = cli("status", inv)
    assert code == 4 and "not provisioned" in out, out


@pytest.fixture
def served(tmp_path, inventory_file):
    """The stand-in server started through the vllm-service role on `local`: (inventory, host variables)."""
    hv = server_vars(tmp_path)
    inv = inventory_file(local=True, host_vars={"local": hv})
    try:
        first = play(SERVICE, inv, tmp_path)
        assert first.exit_code == 0, msgs(first)
        yield inv, hv
    finally:
        play(PLAYBOOKS / "teardown.yaml", inv, tmp_path)
        kill_leftovers([paths_of(hv)["logs"]])


@pytest.mark.slow
def test_restart_server_says_why_it_starts_and_ends_with_where_it_serves(served):
    inv, hv = served
    code, out = cli("restart-server", inv)
    assert code == 0, out
    assert "restart-server stopped the running server first" in out and "no server was running" not in out, out
    said = endpoint_line(out)
    on_stdout = [line for line in out.rstrip().splitlines() if not line.startswith("[WARNING]")]  # stderr, as Ansible's
    assert on_stdout[-1] == said, "the last thing restart-server prints is where to reach the server"
    assert said.startswith(f"local: vLLM listens on 127.0.0.1:{hv['vllm_port']} and serves 'tiny' "), said
    curl = said.split("try it on local: ", 1)[1]
    answer = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, timeout=60)
    assert answer.returncode == 0 and json.loads(answer.stdout)["choices"], answer

    code, out = cli("status", inv)
    assert code == 0 and endpoint_line(out).strip() == said.split(": ", 1)[1], out


@pytest.mark.slow
def test_status_of_a_torn_down_host_is_3_not_running(served, tmp_path):
    inv, hv = served
    code, out = cli("teardown", inv)
    assert code == 0, out
    code, out = cli("status", inv)
    assert code == 3, out
    assert "NOT RUNNING" in out and "torn down at" in out and "invoke provision" in out, out
    code, out = cli("teardown", inv)  # a second teardown changes nothing and keeps the record
    assert code == 0 and "changed=0" in out, out
    assert cli("status", inv)[0] == 3

    again = play(SERVICE, inv, tmp_path)  # provisioned again: the record is history
    assert again.exit_code == 0, msgs(again)
    assert not (paths_of(hv)["pidfile"].parent / "vllm.torndown.json").exists()
    assert cli("status", inv)[0] == 0
