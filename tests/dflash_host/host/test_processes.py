"""_proc: the pidfile contract, proving which processes are ours, and stopping exactly those."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from dflash_host.host.processes import (
    START_TIME_TOLERANCE_S,
    boot_id,
    examine,
    managed_processes,
    mismatch,
    read_pidfile,
    since_boot,
    stop_processes,
    update_pidfile_tree,
    validate_record,
    write_pidfile,
)
from dflash_host.module import Context, ModuleError
from tests.fakes.gpu_holder import SERVER_TREE

TREE = SERVER_TREE  # a vLLM-like tree: tests/fakes/gpu_holder.py


def _record(pid=1234, start=1700000000.5, cmdline=("python3", "-m", "vllm"), tree=()):
    return {"pid": pid, "pgid": pid, "sid": pid, "start_time": start, "cmdline": list(cmdline), "tree": list(tree)}


# ---------------------------------------------------------------- reading and validating


def test_missing_pidfile_reads_as_none(tmp_path):
    assert read_pidfile(str(tmp_path / "nope.pid")) is None


@pytest.mark.parametrize(
    "content, names",
    [
        ("", "not JSON"),
        ("12345\n", "top level must be a JSON object"),
        ("{not json", "not JSON"),
        (json.dumps([1, 2]), "top level must be a JSON object"),
        (json.dumps({"pid": "12", "start_time": 1.0, "cmdline": []}), "the record.pid"),
        (json.dumps({"pid": -4, "start_time": 1.0, "cmdline": []}), "the record.pid"),
        (json.dumps({"pid": True, "start_time": 1.0, "cmdline": []}), "the record.pid"),
        (json.dumps({"pid": 12, "cmdline": ["x"]}), "the record.start_time"),
        (json.dumps({"pid": 12, "start_time": 1.0, "cmdline": "python3 -m vllm"}), "the record.cmdline"),
        (json.dumps({"pid": 12, "start_time": 1.0, "cmdline": [], "pgid": "x"}), "pgid"),
        (json.dumps({"pid": 12, "start_time": 1.0, "cmdline": [], "tree": {}}), "tree must be a list"),
        (json.dumps({"pid": 12, "start_time": 1.0, "cmdline": [], "tree": [{"pid": 3}]}), "tree[0].start_time"),
    ],
)
def test_garbage_pidfile_is_a_clear_error_naming_file_and_field(tmp_path, content, names):
    path = tmp_path / "vllm.pid"
    path.write_text(content)
    with pytest.raises(ModuleError) as err:
        read_pidfile(str(path))
    assert str(path) in err.value.msg
    assert names in err.value.msg
    assert "no process was signalled" in err.value.msg


def test_valid_record_is_normalised_with_defaults():
    rec = validate_record({"pid": 7, "start_time": 5, "cmdline": ["a"]}, "/x")
    assert rec == {"pid": 7, "start_time": 5.0, "cmdline": ["a"], "pgid": None, "sid": None, "tree": []}


# ---------------------------------------------------------------- identity (pure)


@pytest.mark.parametrize(
    "live, expected",
    [
        (None, "no such process"),
        ({"pid": 1234, "start_time": 1700000000.5, "cmdline": ["python3", "-m", "vllm"]}, None),
        ({"pid": 1234, "start_time": 1700000000.5 + START_TIME_TOLERANCE_S / 2, "cmdline": ["python3", "-m", "vllm"]}, None),
        ({"pid": 1234, "start_time": 1700000100.0, "cmdline": ["python3", "-m", "vllm"]}, "was reused"),
        ({"pid": 1234, "start_time": 1700000000.5, "cmdline": ["sleep", "100"]}, "runs 'sleep 100'"),
    ],
)
def test_mismatch_requires_start_time_and_command_line(live, expected):
    why = mismatch(_record(), live)
    if expected is None:
        assert why is None
    else:
        assert expected in why


BOOT = "5f1c9a8e-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    "live, expected",
    [
        # the wall clock was stepped by an hour since the record: the same boot and ticks since boot prove it
        ({"pid": 1234, "start_time": 1700003600.5, "since_boot": 42.17, "boot_id": BOOT, "cmdline": ["python3", "-m", "vllm"]}, None),
        ({"pid": 1234, "start_time": 1700000000.5, "since_boot": 43.0, "boot_id": BOOT, "cmdline": ["python3", "-m", "vllm"]}, "42.17 s after boot"),
        ({"pid": 1234, "start_time": 1700000000.5, "since_boot": 42.17, "boot_id": "other", "cmdline": ["python3", "-m", "vllm"]}, "rebooted"),
        ({"pid": 1234, "start_time": 1700000000.5, "since_boot": 42.17, "boot_id": BOOT, "cmdline": ["sleep", "100"]}, "runs 'sleep 100'"),
    ],
)
def test_mismatch_by_time_since_boot_ignores_a_stepped_clock(live, expected):
    why = mismatch(dict(_record(), since_boot=42.17, boot_id=BOOT), live)
    assert why is None if expected is None else expected in why


def test_since_boot_without_boot_id_is_a_clear_error(tmp_path):
    with pytest.raises(ModuleError, match="the record.boot_id"):
        validate_record({"pid": 7, "start_time": 5, "since_boot": 3.5, "cmdline": ["a"]}, "/x")


# ---------------------------------------------------------------- real process trees


def test_since_boot_is_the_kernels_start_time_of_the_process():
    me = psutil.Process()
    assert since_boot(me.pid) == pytest.approx(me.create_time() - psutil.boot_time(), abs=1.01)
    assert boot_id() and since_boot(2**22 + 1) is None  # beyond pid_max: no such process


def test_a_server_stays_ours_after_the_clock_is_stepped(gpu, tmp_path):
    """A clock stepped after the start (NTP after boot, a VM resumed) moves every wall-clock start time
    by the step: the record's start_time no longer matches, its time since boot still does."""
    tree = gpu.start({"name": "top", "children": [{"name": "engine"}]})
    path = tmp_path / "vllm.pid"
    rec = write_pidfile(str(path), tree.procs["top"])
    assert rec["boot_id"] == boot_id() and rec["tree"][0]["since_boot"] == since_boot(tree.pids["engine"])
    stepped = dict(rec, start_time=rec["start_time"] - 300, tree=[dict(e, start_time=e["start_time"] - 300) for e in rec["tree"]])
    path.write_text(json.dumps(stepped))
    found = examine(read_pidfile(str(path)))
    assert found["refused"] == [] and {p.pid for p in found["managed"]} == {tree.pids["top"], tree.pids["engine"]}
    # the same record without its boot fields (a pidfile of an older version) is judged by the wall clock
    old = {k: v for k, v in stepped.items() if k not in ("since_boot", "boot_id")}
    old["tree"] = [{k: v for k, v in e.items() if k not in ("since_boot", "boot_id")} for e in stepped["tree"]]
    path.write_text(json.dumps(old))
    assert "was reused" in examine(read_pidfile(str(path)))["refused"][0]["reason"]


def test_write_pidfile_records_group_session_and_current_descendants(gpu, tmp_path):
    tree = gpu.start(TREE)
    path = str(tmp_path / "run" / "vllm.pid")
    rec = write_pidfile(path, tree.procs["top"])
    top = tree.procs["top"]
    assert rec["pid"] == top.pid and rec["pgid"] == top.pid and rec["sid"] == top.pid
    assert rec["start_time"] == top.create_time() and rec["cmdline"] == top.cmdline()
    recorded = {e["pid"] for e in rec["tree"]}
    assert {tree.pids["worker"], tree.pids["grandchild"], tree.pids["detached"]} <= recorded
    assert read_pidfile(path) == validate_record(json.loads(open(path).read()), path)
    assert [f for f in os.listdir(tmp_path / "run") if f != "vllm.pid"] == []  # no temp file left


def test_update_pidfile_tree_adds_new_descendants_and_drops_dead_ones(gpu, tmp_path):
    tree = gpu.start({"name": "top"})
    path = str(tmp_path / "vllm.pid")
    write_pidfile(path, tree.procs["top"])
    child = subprocess.Popen(["sleep", "60"])  # a child of the test, not of top: must not be added
    try:
        rec = update_pidfile_tree(path)
        assert rec["tree"] == []
        late = gpu.start({"name": "late"}, new_session=False)  # unrelated to top either
        rec = update_pidfile_tree(path)
        assert all(e["pid"] != late.pids["late"] for e in rec["tree"])
    finally:
        child.kill()
        child.wait()
    tree2 = gpu.start({"name": "top2", "children": [{"name": "kid"}]})
    path2 = str(tmp_path / "vllm2.pid")
    rec = write_pidfile(path2, tree2.procs["top2"])
    assert [e["pid"] for e in rec["tree"]] == [tree2.pids["kid"]]
    tree2.procs["kid"].kill()
    tree2.procs["kid"].wait(5)
    assert update_pidfile_tree(path2)["tree"] == []


def test_update_pidfile_tree_without_pidfile_is_an_error(tmp_path):
    with pytest.raises(ModuleError, match="does not exist"):
        update_pidfile_tree(str(tmp_path / "none.pid"))


def test_managed_processes_are_the_tree_including_a_recorded_child_that_left_the_group(gpu, tmp_path):
    tree = gpu.start(TREE)
    path = str(tmp_path / "vllm.pid")
    write_pidfile(path, tree.procs["top"])
    gpu.release()  # the detached holder's parent exits: it is orphaned, in its own session
    detached = tree.procs["detached"]
    deadline = time.monotonic() + 5
    while detached.ppid() == tree.pids["top"] or any(p.pid == tree.pids["top"] for p in detached.parents()):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert os.getpgid(detached.pid) != tree.pids["top"]
    unrelated = gpu.start({"name": "unrelated", "mib": 100})
    pids = {p.pid for p in managed_processes(read_pidfile(path))}
    assert {tree.pids[n] for n in ("top", "worker", "grandchild", "detached")} <= pids
    assert unrelated.pids["unrelated"] not in pids
    assert os.getpid() not in pids


def test_reused_pid_is_refused_and_reported(gpu, tmp_path):
    other = gpu.start({"name": "unrelated"})
    proc = other.procs["unrelated"]
    # The record of an earlier process that had this PID: started 1 h before, other command.
    rec = _record(pid=proc.pid, start=proc.create_time() - 3600, cmdline=["python3", "-m", "vllm"])
    found = examine(rec)
    assert found["managed"] == []
    assert found["refused"][0]["pid"] == proc.pid and "was reused" in found["refused"][0]["reason"]
    # Same start time, different command line: refused too.
    rec = _record(pid=proc.pid, start=proc.create_time(), cmdline=["python3", "-m", "vllm"])
    assert examine(rec)["managed"] == []
    assert "the recorded process ran" in examine(rec)["refused"][0]["reason"]


def test_orphaned_group_members_never_recorded_are_unproven_not_managed(gpu, tmp_path):
    tree = gpu.start({"name": "top", "children": [{"name": "engine", "mib": 4096}]})
    path = str(tmp_path / "vllm.pid")
    rec = write_pidfile(path, tree.procs["top"])
    rec["tree"] = []  # as if written before the engine started and never updated
    tree.procs["top"].kill()  # SIGKILL to the top alone: the engine is orphaned in the group
    tree.popen.wait(5)
    found = examine(rec)
    assert found["managed"] == []
    assert [u["pid"] for u in found["unproven_group"]] == [tree.pids["engine"]]
    assert tree.procs["engine"].is_running()


# ---------------------------------------------------------------- stopping


def test_stop_kills_term_ignoring_parent_and_terminates_the_rest(gpu, tmp_path):
    tree = gpu.start(TREE)
    path = str(tmp_path / "vllm.pid")
    write_pidfile(path, tree.procs["top"])
    gpu.release()
    procs = managed_processes(read_pidfile(path))
    res = stop_processes(procs, grace_s=0.5, ctx=Context())
    assert res["survivors"] == [] and res["errors"] == []
    assert tree.pids["top"] in res["killed"]  # it ignores SIGTERM
    assert {tree.pids["worker"], tree.pids["grandchild"], tree.pids["detached"]} <= set(res["terminated"])
    assert tree.pids["top"] in res["groups"]
    for name, proc in tree.procs.items():
        assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE, name
    assert gpu.used_mib() == 0


def test_stop_in_check_mode_signals_nothing(gpu):
    tree = gpu.start({"name": "top", "mib": 100})
    res = stop_processes([tree.procs["top"]], 0.1, Context(check=True))
    assert [s["pid"] for s in res["stopped"]] == [tree.pids["top"]]
    assert tree.procs["top"].is_running() and res["terminated"] == res["killed"] == []


def test_stop_never_signals_this_process_group_or_ancestors(gpu):
    tree = gpu.start({"name": "same-group"}, new_session=False)  # shares the test runner's group
    me = psutil.Process()
    res = stop_processes([tree.procs["same-group"], me, psutil.Process(me.ppid())], 0.2, Context())
    assert res["groups"] == []  # killpg would hit the test runner
    assert set(res["skipped"]) == {me.pid, me.ppid()}
    assert res["terminated"] == [tree.pids["same-group"]]


def test_stop_of_already_gone_processes_is_a_no_op():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    proc = psutil.Process(child.pid)
    child.kill()
    child.wait()
    res = stop_processes([proc], 0.1, Context())
    assert res["stopped"] == [] and res["killed"] == [] and res["terminated"] == []


def test_stop_group_kill_is_skipped_when_the_group_has_members_not_ours(gpu):
    tree = gpu.start({"name": "top", "children": [{"name": "kid"}]})
    res = stop_processes([tree.procs["kid"]], 0.5, Context())
    assert res["groups"] == []  # top is in the group but was not given: signal kid alone
    assert tree.procs["top"].is_running()
    assert res["terminated"] == [tree.pids["kid"]]
    os.kill(tree.pids["top"], signal.SIGKILL)
