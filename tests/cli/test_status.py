"""`invoke status` exits as `systemctl status` does: 0 running and healthy, 3 not running, 4 unknown (never
provisioned there, or unreachable). Real processes: the engine starts the stand-in server
(tests/fakes/fake_vllm.py) through the vllm-service role; `invoke status` runs as a person types it."""

from __future__ import annotations

import json
import os
import signal

import psutil
import pytest

from tests.cli.helpers import invoke
from tests.fakes.served import PLAYBOOKS, SERVICE, START, msgs, paths_of, result_of, server_vars
from tests.fakes.vllm_processes import kill_leftovers
from tests.helpers import play


def status(inv, host="local", *more):
    return invoke("status", "--host", host, "-i", str(inv), *more)


def test_a_host_never_provisioned_is_unknown_4(tmp_path, inventory_file):
    inv = inventory_file(local=True, host_vars={"local": {"dfp_root": str(tmp_path / "nothing-here")}})
    code, out = status(inv)
    assert code == 4, out
    assert "not provisioned" in out and "Traceback" not in out


def test_an_unreachable_host_is_unknown_4_not_3(tmp_path):
    dead = {"ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_user": "root", "dfp_connect_retries": 1}
    inv = tmp_path / "inv.yaml"
    inv.write_text(json.dumps({"all": {"hosts": {"dead": dead}}}))  # JSON is YAML
    code, out = status(inv, "dead", "--json")
    assert code == 4, out
    assert json.loads(out[: out.rindex("}") + 1])["dead"]["unreachable"] is True


@pytest.mark.slow
def test_running_and_healthy_is_0_and_a_dead_server_is_3(tmp_path, inventory_file):
    hv = server_vars(tmp_path)
    inv = inventory_file(local=True, host_vars={"local": hv})
    first = play(SERVICE, inv, tmp_path)
    try:
        assert first.exit_code == 0, msgs(first)
        code, out = status(inv)
        assert code == 0 and "RUNNING" in out, out
        pid = result_of(first, START, "local")["pid"]
        os.kill(pid, signal.SIGKILL)
        try:
            psutil.Process(pid).wait(timeout=10)
        except psutil.Error:  # already gone
            pass
        code, out = status(inv)
        assert code == 3 and "NOT RUNNING" in out, out
    finally:
        play(PLAYBOOKS / "teardown.yaml", inv, tmp_path)
        kill_leftovers([paths_of(hv)["logs"]])
