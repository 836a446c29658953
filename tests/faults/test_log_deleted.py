"""The server's log deleted while the server runs: `invoke status` still says the server runs (PID,
health, served model) and says the log is gone, naming the descriptor the server still writes it
through; provision leaves the healthy server alone; a restart starts a fresh log.

Real processes: the engine starts the stand-in server (tests/fakes/fake_vllm.py) on `local` through
the vllm-service role, and `invoke status` runs as the command a person types.
"""

from __future__ import annotations

import os

import pytest

from tests.fakes.served import PLAYBOOKS, SERVICE, START, invoke_status, msgs, paths_of, result_of, server_vars
from tests.fakes.vllm_processes import kill_leftovers
from tests.helpers import play


@pytest.fixture
def served(tmp_path, inventory_file):
    hv = server_vars(tmp_path)
    inv = inventory_file(local=True, host_vars={"local": hv})
    p = paths_of(hv)
    first = play(SERVICE, inv, tmp_path)
    try:
        assert first.exit_code == 0, msgs(first)
        yield inv, p, result_of(first, START, "local")["pid"]
    finally:
        play(PLAYBOOKS / "teardown.yaml", inv, tmp_path)
        assert not kill_leftovers([p["logs"]]), "stand-in server processes survived teardown"


def test_status_after_the_log_is_deleted_says_running_and_where_the_log_still_is(served, tmp_path):
    inv, p, pid = served
    before = p["log"].read_text()
    os.unlink(p["log"])

    st = invoke_status(inv)
    assert st["running"] and st["pid"] == pid and st["health"] == "ok" and st["served_model"] == "tiny", st
    assert st["log"] == str(p["log"]) and st["log_present"] is False
    fd = st["log_open_fd"]
    assert fd and fd.startswith(f"/proc/{pid}/fd/") and str(p["log"]) in st["msg"] and fd in st["msg"]
    with open(fd, encoding="utf-8", errors="replace") as fh:  # the output is still there, through the fd
        assert fh.read().startswith(before.splitlines()[0])


def test_provision_leaves_the_server_alone_and_a_restart_writes_a_new_log(served, tmp_path):
    inv, p, pid = served
    os.unlink(p["log"])

    again = play(SERVICE, inv, tmp_path)
    assert again.exit_code == 0 and again.recap["local"]["changed"] == 0, msgs(again)
    assert result_of(again, START, "local")["pid"] == pid

    restarted = play(PLAYBOOKS / "restart-server.yaml", inv, tmp_path)
    assert restarted.exit_code == 0, msgs(restarted)
    new = result_of(restarted, START, "local")["pid"]
    assert new != pid and f"pid={new}" in p["log"].read_text()
    st = invoke_status(inv)
    assert st["running"] and st["pid"] == new and st["log_present"] is True and "deleted" not in st["msg"]
