"""A PID in the managed server's pidfile that now belongs to an unrelated process: teardown, restart,
provision and gpu-cleanup never signal it.

The server is started for real (the stand-in, through the vllm-service role on `local`, GPU facts from
the stand-in nvidia-smi), then dies. An unrelated long-lived process tree starts in its own session,
and the pidfile is made to name it exactly as a reused PID looks: the recorded PID (and process
group, session, tree entry) are now the unrelated processes'. Either the recorded command line is
still the dead server's ("another command"), or the reused PID even runs the very command recorded
and only its start time tells it apart ("the same command"; the server started a minute before).
(A test cannot choose a PID, so the record is moved onto the live process instead of the live
process onto the recorded PID: the module sees the same thing.)
"""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest

from tests.fakes.served import PLAYBOOKS, START, msgs, paths_of, result_of, server_vars
from tests.fakes.vllm_processes import kill_leftovers, session_alive
from tests.helpers import play

CLEANUP = "Stop the managed server's whole process tree and wait until GPU memory is free"
PROVISION = """\
- name: provision (the server part)
  hosts: all
  vars:
    gpu_cleanup_keep_running: true
  roles:
    - common
    - gpu-cleanup
    - vllm-service
"""
GPU_CLEANUP = """\
- name: gpu cleanup
  hosts: all
  pre_tasks:
    - import_role: {name: common, tasks_from: variables}
  roles:
    - gpu-cleanup
"""
# The unrelated job: a session leader (so its PGID is the reused PID, like the server's was) with a child.
OTHER_JOB = {"name": "other", "children": [{"name": "other-child"}]}


def wait_gone(pids: list, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
        assert time.monotonic() < deadline, f"{pids} did not exit"
        time.sleep(0.05)


@pytest.fixture
def reused(tmp_path, inventory_file, gpu):
    """Start the server, let it die, start the unrelated job, point the pidfile's PIDs at it.

    Yields (inventory, paths, make); make(case, mib) sets the situation up (a job holding `mib` MiB
    of the stand-in GPU, the record as in `case`) and returns the job's Tree."""
    hv = server_vars(tmp_path, nvidia_smi=gpu.nvidia_smi, gpu_cleanup_grace_s=0.5, gpu_cleanup_timeout_s=3)
    inv = inventory_file(local=True, host_vars={"local": hv})
    p = paths_of(hv)

    def make(case: str, mib: int = 0):
        up = play(PROVISION, inv, tmp_path)
        assert up.exit_code == 0, msgs(up)
        record = json.loads(p["pidfile"].read_text())
        assert record["tree"], "the EngineCore child should be recorded in the pidfile's tree"
        members = session_alive(record["pid"])
        for pid in members:  # the server dies (a crash: nothing cleans up after it)
            os.kill(pid, signal.SIGKILL)
        wait_gone(members)
        job = gpu.start(dict(OTHER_JOB, mib=mib))
        top, child = job.procs["other"], job.procs["other-child"]
        assert os.getpgid(top.pid) == top.pid
        record.update(pid=top.pid, pgid=top.pid, sid=top.pid)  # start_time and cmdline: still the server's
        record["tree"] = [dict(record["tree"][0], pid=child.pid)]
        if case == "the same command":
            record.update(cmdline=top.cmdline(), start_time=record["start_time"] - 60)
            record["tree"][0].update(cmdline=child.cmdline(), start_time=record["tree"][0]["start_time"] - 60)
        p["pidfile"].write_text(json.dumps(record, indent=1) + "\n")
        return job

    try:
        yield inv, p, make
    finally:
        play(PLAYBOOKS / "teardown.yaml", inv, tmp_path, extra_vars={"nvidia_smi": "/nonexistent/nvidia-smi"})
        assert not kill_leftovers([p["logs"]]), "stand-in server processes survived"


def untouched(job) -> None:
    for name, proc in job.procs.items():
        assert proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE, f"the unrelated {name} was signalled"


CASES = ["another command", "the same command"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("book", ["teardown.yaml", "restart-server.yaml", "provision"])
def test_a_reused_pid_is_never_signalled_and_the_play_converges(reused, tmp_path, book, case):
    inv, p, make = reused
    job = make(case)
    res = play(PROVISION if book == "provision" else PLAYBOOKS / book, inv, tmp_path)
    assert res.exit_code == 0, msgs(res)
    untouched(job)
    if book == "teardown.yaml":
        assert not p["pidfile"].exists()  # stale: it named nothing of ours
    else:  # a new server, and the pidfile names it, not the unrelated job
        new = result_of(res, START, "local")["pid"]
        assert new not in job.pids.values() and json.loads(p["pidfile"].read_text())["pid"] == new
        assert session_alive(new)


@pytest.mark.parametrize("case", CASES)
def test_gpu_cleanup_refuses_a_reused_pid_that_holds_the_gpu_and_names_it(reused, tmp_path, case):
    inv, p, make = reused
    job = make(case, mib=4096)  # the unrelated job holds the GPU: cleanup cannot free it and must say why
    res = play(GPU_CLEANUP, inv, tmp_path)
    assert res.exit_code == 2, msgs(res)
    [r] = res.find(CLEANUP, "local")
    top = job.pids["other"]
    assert r.result["failed"] and f"pid {top} " in r.msg and "does not manage" in r.msg, r.msg
    why = "was reused" if case == "the same command" else "the recorded process ran"
    assert any(f"refused to signal PID {top}" in w and why in w for w in r.result.get("warnings", [])), r.result
    assert r.result["managed"] == [] and "pidfile_removed" not in r.result
    assert p["pidfile"].exists()  # kept: it names a live process that is not ours
    untouched(job)
