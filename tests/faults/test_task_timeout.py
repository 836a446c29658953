"""The task keyword `timeout`: a task that runs too long is stopped on the host and fails; the run goes on."""

from __future__ import annotations

import time

import psutil
import pytest
import yaml

from engine.api import run_playbook


def _play(tmp_path, tasks):
    pb = tmp_path / "pb.yaml"
    pb.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h": {"ansible_connection": "local"}}}}))
    return pb, inv


def test_a_task_past_its_timeout_is_stopped_and_fails(tmp_path):
    token = f"dfp-timeout-{time.time_ns()}"
    pb, inv = _play(tmp_path, [
        {"name": "too long", "command": {"argv": ["python3", "-c", "import time; time.sleep(60)", token]}, "timeout": 1,
         "ignore_errors": True},
        {"name": "next", "debug": {"msg": "still here"}},
    ])
    started = time.monotonic()
    res = run_playbook(pb, inv)
    assert time.monotonic() - started < 15
    first, second = res.results
    assert first.status == "failed" and first.ignored and "timeout of 1.0 s" in first.msg
    assert second.status == "ok"
    time.sleep(0.5)
    assert not [p for p in psutil.process_iter(["cmdline"]) if token in " ".join(p.info["cmdline"] or [])]


@pytest.mark.parametrize("bad", [0, -1, "soon", True])
def test_timeout_must_be_positive_seconds(tmp_path, bad):
    pb, inv = _play(tmp_path, [{"name": "x", "command": {"argv": ["true"]}, "timeout": bad}])
    res = run_playbook(pb, inv)
    assert res.exit_code == 4 and "timeout" in res.error
