"""Block keywords given to the block's tasks (check_mode, run_once, notify, ignore_errors, become), a task's own
value winning; and any_errors_fatal with rescue and always: one host failing sends every host into the rescue, and
a fatal failure still runs the always sections it is inside. Compared with real ansible-playbook on local hosts
(tests/engine/run/test_play_flow.py's log of `HOST:WORD` lines)."""

from __future__ import annotations

from tests.engine.run.test_play_flow import log_task, ours, same

FAIL_B = {"name": "b fails", "fail": {"msg": "no"}, "when": "inventory_hostname == 'b'"}


def test_notify_run_once_and_ignore_errors_come_from_the_block(tmp_path):
    play = {"hosts": "all", "tasks": [
        {"block": [log_task("notifies"), log_task("own", notify="other")], "notify": "h"},
        {"block": [log_task("once")], "run_once": True},
        {"block": [FAIL_B, {"name": "fails anyway", "fail": {"msg": "x"}, "ignore_errors": False,
                            "when": "inventory_hostname == 'c'"}], "ignore_errors": True},
        log_task("after")],
        "handlers": [log_task("h"), log_task("other")]}
    seq = same(tmp_path, play)
    assert seq["a"] == ["notifies", "own", "once", "after", "h", "other"]
    assert seq["b"] == ["notifies", "own", "after", "h", "other"]
    assert seq["c"] == ["notifies", "own"]


def test_check_mode_comes_from_the_block(tmp_path):
    marker = tmp_path / "not-made"
    play = {"hosts": "a", "tasks": [
        {"block": [{"name": "touch", "file": {"path": str(marker), "state": "touch"}},
                   log_task("own-false", check_mode=False)], "check_mode": True}]}
    seq = same(tmp_path, play)
    assert seq == {"a": ["own-false"]} and not marker.exists()


def test_any_errors_fatal_sends_every_host_into_the_rescue(tmp_path):
    play = {"hosts": "all", "any_errors_fatal": True, "tasks": [
        {"block": [FAIL_B, log_task("not-reached")], "rescue": [log_task("rescued")]},
        log_task("recovered")]}
    seq = same(tmp_path, play)
    assert seq == {h: ["rescued", "recovered"] for h in "abc"}


def test_a_fatal_failure_still_runs_the_always_it_is_in(tmp_path):
    play = {"hosts": "all", "any_errors_fatal": True, "tasks": [
        {"block": [FAIL_B, log_task("not-reached")], "always": [log_task("always")]},
        log_task("stopped")]}
    seq = same(tmp_path, play)
    assert seq == {h: ["always"] for h in "abc"}


def test_a_failing_rescue_is_fatal_after_the_always(tmp_path):
    play = {"hosts": "all", "any_errors_fatal": True, "tasks": [
        {"block": [FAIL_B], "rescue": [{"name": "rescue fails", "fail": {"msg": "x"},
                                        "when": "inventory_hostname == 'b'"}, log_task("rescue-after")],
         "always": [log_task("always")]},
        log_task("stopped")]}
    seq = same(tmp_path, play)
    assert seq == {h: ["always"] for h in "abc"}
    _code, _seq, res = ours(tmp_path, play)
    assert "host b failed task 'rescue fails'" in res.find("Play stopped")[0].msg
