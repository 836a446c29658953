"""The server crashing at start, on the first (smoke) request, and after readiness while acceptance is
read: the play fails naming the cause from the log, no process of the crashed server is left, and the
next provision with a healthy server converges (then changes nothing).

Real processes throughout: the engine runs the vllm-service role on `local`, which starts the stand-in
server (tests/fakes/fake_vllm.py) the way it starts `vllm serve`; its crash modes are vLLM's.
"""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from tests.fakes.served import (
    PLAYBOOKS,
    SERVICE,
    START,
    alive_servers,
    fake_env,
    invoke_status,
    msgs,
    paths_of,
    result_of,
    server_vars,
)
from tests.fakes.vllm_processes import kill_leftovers
from tests.helpers import play


@pytest.fixture
def host(tmp_path, inventory_file):
    """(inventory, host vars, paths) for `local`; afterwards teardown, and any survivor fails the test."""
    made = []

    def make(mode: str, **fake):
        hv = server_vars(tmp_path, mode, fake=fake)
        inv = inventory_file(local=True, host_vars={"local": hv})
        made.append((inv, hv))
        return inv, hv, paths_of(hv)

    yield make
    for inv, hv in made:
        play(PLAYBOOKS / "teardown.yaml", inv, tmp_path)
        leaked = kill_leftovers([paths_of(hv)["logs"]])
        assert not leaked, f"stand-in server processes survived teardown: {leaked}"


def fails_cleanly(res, p: dict, root_cause: str) -> dict:
    """The failed start: exit 2, one paragraph quoting the root cause and the log, nothing left running."""
    assert res.exit_code == 2, msgs(res)
    failed = result_of(res, START, "local")
    assert failed["failed"] and failed.get("start_failed"), failed
    assert root_cause in failed["msg"] and str(p["log"]) in failed["msg"], failed["msg"]
    assert "exception" not in failed and "module vllm_server crashed" not in failed["msg"], failed  # no tool bug
    assert alive_servers(p["logs"]) == {}, "processes of the crashed server are still alive"
    assert not p["pidfile"].exists() and not p["running"].exists()
    return failed


def converges(inv: Path, tmp_path: Path, p: dict) -> int:
    """A healthy server next: the play starts it and succeeds; once more changes nothing. Its PID."""
    healthy = {"vllm_env": fake_env("normal")}
    first = play(SERVICE, inv, tmp_path, extra_vars=healthy)
    assert first.exit_code == 0, msgs(first)
    started = result_of(first, START, "local")
    assert started["changed"] and started["smoke_tokens"] == 24
    again = play(SERVICE, inv, tmp_path, extra_vars=healthy)
    assert again.exit_code == 0 and again.recap["local"]["changed"] == 0, msgs(again)
    assert result_of(again, START, "local")["pid"] == started["pid"]
    assert list(alive_servers(p["logs"])) == [started["pid"]]
    return started["pid"]


def test_crash_at_start_leaving_its_engine_core_fails_clearly_and_the_next_provision_converges(host, tmp_path):
    inv, hv, p = host("crash_start", keep_core="1")  # the EngineCore child outlives its parent
    res = play(SERVICE, inv, tmp_path)
    fails_cleanly(res, p, "AssertionError: Tried to load weights")
    converges(inv, tmp_path, p)


def test_crash_on_the_first_smoke_request_fails_clearly_and_the_next_provision_converges(host, tmp_path):
    inv, hv, p = host("crash_first_request")
    res = play(SERVICE, inv, tmp_path)
    failed = fails_cleanly(res, p, "Unsupported CPU attention configuration: head_dim=16")
    assert "smoke completion" in failed["msg"]
    converges(inv, tmp_path, p)


def test_crash_while_acceptance_is_read_after_readiness_fails_clearly_and_the_next_provision_converges(host, tmp_path):
    inv, hv, p = host("crash_on_metrics", crash_at_metrics="2")  # the /metrics read after the smoke requests
    res = play(SERVICE, inv, tmp_path)
    fails_cleanly(res, p, "RuntimeError: NCCL error: unhandled system error")
    converges(inv, tmp_path, p)


def test_a_server_that_dies_while_status_is_read_is_reported_not_running_and_provision_heals_it(host, tmp_path):
    inv, hv, p = host("crash_on_metrics", crash_at_metrics="5")  # 1-2 acceptance, 3-4 prefix cache: the start; 5: `invoke status`
    first = play(SERVICE, inv, tmp_path)
    assert first.exit_code == 0, msgs(first)
    old = result_of(first, START, "local")["pid"]

    st = invoke_status(inv, expect=3)
    assert not st["running"] and st["pid"] is None and st["exited_pid"] == old, st
    assert "exited while its status was read" in st["msg"]
    assert not psutil.pid_exists(old) or psutil.Process(old).status() == psutil.STATUS_ZOMBIE
    assert alive_servers(p["logs"]), "the crashed server's EngineCore should still be there for provision to stop"
    converges(inv, tmp_path, p)  # stops the orphaned EngineCore, starts a healthy server


def test_a_running_server_that_dies_while_provision_verifies_it_is_never_reported_serving(host, tmp_path):
    """Second provision: the server runs, the verify's acceptance read kills it. The play must not end
    with 'running and serving' while nothing serves: it restarts the server (or fails), and the PID it
    reports answers."""
    inv, hv, p = host("crash_on_metrics", crash_at_metrics="6")  # reads 1-4: the start; 5-6: the verify's acceptance
    first = play(SERVICE, inv, tmp_path)
    assert first.exit_code == 0, msgs(first)
    old = result_of(first, START, "local")["pid"]

    second = play(SERVICE, inv, tmp_path)
    now = result_of(second, START, "local")
    if second.exit_code == 0:
        assert now["pid"] != old and psutil.pid_exists(now["pid"]), now["msg"]
        assert alive_servers(p["logs"]) == {now["pid"]: alive_servers(p["logs"])[now["pid"]]}
    else:
        assert now["failed"] and "RuntimeError: NCCL error" in now["msg"], now["msg"]
        assert alive_servers(p["logs"]) == {}
