"""gpu_cleanup: free the GPU of the managed tree, leave (and list) everything else.

Pure decisions are tested as tables; the module itself runs by hand (`python3 -m library.gpu_cleanup
ARGS.json`) against real process trees that a stand-in nvidia-smi reports as GPU holders.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dflash_host.host.gpu_holders import blocked_by_foreign, foreign_decision, parse_kill_foreign
from dflash_host.host.gpus import busy, parse_compute_apps, scan_device_fds, select_gpus
from dflash_host.host.processes import write_pidfile
from dflash_host.module import ModuleError
from library.gpu_cleanup import check_numbers
from tests.fakes.gpu_holder import SERVER_TREE, FakeGpu

ROOT = Path(__file__).resolve().parents[2]
MODULE = "library.gpu_cleanup"  # run by hand: python3 -m MODULE, from ROOT
OTHER_USER = "dfp-gpu-other"

TREE = SERVER_TREE  # a vLLM-like tree: tests/fakes/gpu_holder.py


# ---------------------------------------------------------------- pure decisions


@pytest.mark.parametrize(
    "entries, pids, cmds",
    [
        ([], set(), set()),
        ([1234, "5678", " 42 "], {1234, 5678, 42}, set()),
        (["python3  train.py --gpu 0"], set(), {"python3 train.py --gpu 0"}),
        ([99, "sleep 100"], {99}, {"sleep 100"}),
    ],
)
def test_kill_foreign_entries_split_into_pids_and_command_lines(entries, pids, cmds):
    assert parse_kill_foreign(entries) == (pids, cmds)


@pytest.mark.parametrize("bad", [[1], [0], [True], [""], [None], [{"pid": 3}]])
def test_kill_foreign_rejects_entries_that_name_nothing_safely(bad):
    with pytest.raises(ModuleError, match="kill_foreign"):
        parse_kill_foreign(bad)


@pytest.mark.parametrize(
    "pid, cmdline, uid, kill_pids, kill_cmds, allow, expected, says",
    [
        (10, ["python3", "x.py"], 0, set(), set(), False, False, "not named"),
        (10, ["python3", "x.py"], 0, {10}, set(), False, True, "named"),
        (10, ["python3", "x.py"], 0, set(), {"python3 x.py"}, False, True, "named"),
        (10, ["python3", "x.py"], 0, set(), {"python3 x.py --other"}, False, False, "not named"),
        (10, ["python3", "x.py"], 1001, {10}, set(), False, False, "another user"),
        (10, ["python3", "x.py"], 1001, {10}, set(), True, True, "named"),
        (10, [], None, {10}, set(), True, False, "cannot be read"),
    ],
)
def test_foreign_holder_is_stopped_only_when_named_and_owned_or_allowed(
    pid, cmdline, uid, kill_pids, kill_cmds, allow, expected, says
):
    ok, reason = foreign_decision(pid, cmdline, uid, 0, kill_pids, kill_cmds, allow)
    assert ok is expected and says in reason


GPUS = [
    {"index": 0, "memory_used_mib": 0, "uuid": "a"},
    {"index": 1, "memory_used_mib": 5000, "uuid": "b"},
    {"index": 2, "memory_used_mib": None, "uuid": "c"},
]


@pytest.mark.parametrize(
    "indices, threshold, busy_ones",
    [([0, 1, 2], 1024, [1, 2]), ([0], 1024, []), ([1], 6000, []), ([1], 5000, [1]), ([0], 0, [0])],
)
def test_busy_gpus_are_at_or_above_the_threshold_and_unknown_counts_as_busy(indices, threshold, busy_ones):
    assert [g["index"] for g in busy(GPUS, indices, threshold)] == busy_ones


@pytest.mark.parametrize("requested, expected", [(None, [0, 1, 2]), ([1], [1]), (["2", 0], [2, 0])])
def test_select_gpus_defaults_to_all(requested, expected):
    assert select_gpus(GPUS, requested) == expected


@pytest.mark.parametrize("requested, says", [([7], "has GPU(s) [0, 1, 2]"), (["x"], "not a GPU index")])
def test_select_gpus_rejects_unknown_indices(requested, says):
    with pytest.raises(ModuleError) as err:
        select_gpus(GPUS, requested)
    assert says in err.value.msg


@pytest.mark.parametrize(
    "left, expected",
    [
        ([], {}),
        ([{"gpu": 0, "mib": 500}], {}),
        ([{"gpu": 0, "mib": 500}, {"gpu": 0, "mib": 600}], {0: 1100}),
        ([{"gpu": 3, "mib": 9000}], {}),  # not a GPU we check
        ([{"gpu": None, "mib": None}], {}),  # unknown: wait and see instead
    ],
)
def test_foreign_holders_that_alone_keep_a_gpu_busy(left, expected):
    assert blocked_by_foreign(left, [0, 1], 1024) == expected


@pytest.mark.parametrize("t, timeout, grace", [(-1, 1, 1), (1, -1, 1), (1, 1, -0.5)])
def test_negative_numbers_are_rejected(t, timeout, grace):
    with pytest.raises(ModuleError):
        check_numbers(t, timeout, grace)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", []),
        ("No running processes found\n", []),
        (
            "4512, VLLM::EngineCore, 43628, GPU-1\n",
            [{"pid": 4512, "process_name": "VLLM::EngineCore", "used_mib": 43628, "gpu_uuid": "GPU-1"}],
        ),
        (
            "7, /usr/bin/python3, [N/A], GPU-2\n",
            [{"pid": 7, "process_name": "/usr/bin/python3", "used_mib": None, "gpu_uuid": "GPU-2"}],
        ),
        ("8, a, b, 10, GPU-3\n", [{"pid": 8, "process_name": "a, b", "used_mib": 10, "gpu_uuid": "GPU-3"}]),
    ],
)
def test_compute_apps_parsing(text, expected):
    assert parse_compute_apps(text) == expected


# ---------------------------------------------------------------- the module on real processes


@pytest.fixture(scope="module")
def other_user():
    """A second local user for a foreign holder (root only); removed afterwards if we made it."""
    if os.geteuid() != 0:
        pytest.skip("creating another user's process needs root")
    made = False
    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        cmd = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER]
        made = subprocess.run(cmd, check=False).returncode == 0
        pwd.getpwnam(OTHER_USER)  # made here, or by a parallel run meanwhile
    yield OTHER_USER
    if made:
        subprocess.run(["userdel", OTHER_USER], check=False)


def run_module(args: dict, tmp_path: Path, check: bool = False) -> dict:
    path = tmp_path / f"args-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(args))
    argv = [sys.executable, "-m", MODULE, str(path)] + (["--check"] if check else [])
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, timeout=120, check=False)
    assert proc.stderr == b"", proc.stderr.decode()
    result = json.loads(proc.stdout)
    assert proc.returncode == (1 if result["failed"] else 0)
    return result


def base_args(gpu: FakeGpu, pidfile: str, **extra) -> dict:
    args = {"pidfile": pidfile, "nvidia_smi": gpu.nvidia_smi, "grace_s": 0.5, "timeout_s": 5, "device_prefix": gpu.device_prefix}
    args.update(extra)
    return args


def gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def start_server(gpu: FakeGpu, tmp_path: Path, node: dict = TREE) -> tuple:
    tree = gpu.start(node)
    pidfile = str(tmp_path / "run" / "vllm.pid")
    write_pidfile(pidfile, tree.procs[node["name"]])
    gpu.release()  # the detached child is orphaned now; only the pidfile's tree proves it is ours
    return tree, pidfile


def test_cleanup_stops_the_whole_managed_tree_and_waits_for_the_memory(gpu, tmp_path):
    tree, pidfile = start_server(gpu, tmp_path)
    assert gpu.used_mib() == 3584
    res = run_module(base_args(gpu, pidfile), tmp_path)
    assert not res["failed"] and res["changed"], res["msg"]
    assert res["gpus"] == [{"index": 0, "name": "NVIDIA H200", "total_mib": 143771, "before_mib": 3584, "after_mib": 0}]
    assert all(gone(p) for p in tree.procs.values())
    assert tree.pids["top"] in res["stopped"]["killed"]  # ignores SIGTERM
    assert set(res["stopped"]["pids"]) == set(tree.pids.values())
    assert res["pidfile_removed"] == pidfile and not os.path.exists(pidfile)
    assert res["seconds"] >= 0.5 and res["foreign"] == []
    assert "GPU free: GPU 0 0 MiB" in res["msg"]


def test_second_run_reports_no_change(gpu, tmp_path):
    _, pidfile = start_server(gpu, tmp_path)
    assert run_module(base_args(gpu, pidfile), tmp_path)["changed"]
    again = run_module(base_args(gpu, pidfile), tmp_path)
    assert not again["failed"] and not again["changed"]
    assert again["msg"].startswith("GPU free")


def test_check_mode_lists_what_would_be_stopped_and_changes_nothing(gpu, tmp_path):
    tree, pidfile = start_server(gpu, tmp_path)
    res = run_module(base_args(gpu, pidfile), tmp_path, check=True)
    assert res["changed"] and not res["failed"]
    assert set(res["would_stop"]) == set(tree.pids.values())
    assert all(p.is_running() for p in tree.procs.values())
    assert os.path.exists(pidfile) and gpu.used_mib() == 3584


def test_foreign_holder_is_listed_not_killed_and_fails_when_it_keeps_the_gpu_busy(gpu, tmp_path):
    tree, pidfile = start_server(gpu, tmp_path)
    foreign = gpu.start({"name": "foreign", "mib": 2048})
    res = run_module(base_args(gpu, pidfile), tmp_path)
    assert res["failed"]
    pid = foreign.pids["foreign"]
    assert f"pid {pid} (user root, GPU 0, 2048 MiB)" in res["msg"]
    assert "gpu_cleanup_kill_foreign" in res["msg"]
    assert [f["pid"] for f in res["foreign"]] == [pid] and res["foreign"][0]["action"] == "left"
    assert foreign.procs["foreign"].is_running()
    assert all(gone(p) for p in tree.procs.values())  # ours are stopped all the same
    assert gpu.used_mib() == 2048


def test_small_foreign_holder_is_listed_but_the_gpu_counts_as_free(gpu, tmp_path):
    _, pidfile = start_server(gpu, tmp_path)
    foreign = gpu.start({"name": "small", "mib": 300})
    res = run_module(base_args(gpu, pidfile), tmp_path)
    assert not res["failed"], res["msg"]
    assert "1 foreign holder(s) left alone" in res["msg"]
    assert foreign.procs["small"].is_running()


@pytest.mark.parametrize("by", ["pid", "cmdline"])
def test_foreign_holder_named_in_kill_foreign_is_stopped(gpu, tmp_path, by):
    _, pidfile = start_server(gpu, tmp_path)
    foreign = gpu.start({"name": "named", "mib": 2048})
    proc = foreign.procs["named"]
    entry = proc.pid if by == "pid" else " ".join(proc.cmdline())
    res = run_module(base_args(gpu, pidfile, kill_foreign=[entry]), tmp_path)
    assert not res["failed"], res["msg"]
    assert res["foreign"][0]["action"] == "stopped"
    assert gone(proc) and gpu.used_mib() == 0


def test_other_users_holder_survives_unless_other_users_are_allowed(gpu, tmp_path, other_user):
    foreign = gpu.start({"name": "theirs", "mib": 2048}, user=other_user)
    proc = foreign.procs["theirs"]
    assert proc.username() == other_user
    args = base_args(gpu, str(tmp_path / "none.pid"), kill_foreign=[proc.pid])
    res = run_module(args, tmp_path)
    assert res["failed"] and proc.is_running()
    assert f"pid {proc.pid} (user {other_user}" in res["msg"]
    assert "belongs to another user" in res["foreign"][0]["reason"]
    res = run_module(dict(args, allow_other_users=True), tmp_path)
    assert not res["failed"], res["msg"]
    assert gone(proc)


def test_garbage_pidfile_fails_clearly_and_kills_nothing(gpu, tmp_path):
    tree = gpu.start({"name": "top", "children": [{"name": "engine", "mib": 4096}]})
    pidfile = tmp_path / "vllm.pid"
    pidfile.write_text(f"{tree.pids['top']}\n")  # a bare PID, as a shell script would write
    res = run_module(base_args(gpu, str(pidfile)), tmp_path)
    assert res["failed"] and str(pidfile) in res["msg"] and "no process was signalled" in res["msg"]
    assert all(p.is_running() for p in tree.procs.values())
    assert pidfile.read_text() == f"{tree.pids['top']}\n"


def test_reused_pid_in_the_pidfile_is_refused_and_left_running(gpu, tmp_path):
    other = gpu.start({"name": "unrelated"})
    proc = other.procs["unrelated"]
    pidfile = tmp_path / "vllm.pid"
    record = {
        "pid": proc.pid,
        "pgid": proc.pid,
        "sid": proc.pid,
        "start_time": proc.create_time() - 7200,
        "cmdline": ["/opt/venv/bin/python3", "-m", "vllm.entrypoints.cli.main", "serve"],
        "tree": [],
    }
    pidfile.write_text(json.dumps(record))
    res = run_module(base_args(gpu, str(pidfile)), tmp_path)
    assert not res["failed"] and not res["changed"], res["msg"]
    assert any(f"refused to signal PID {proc.pid}" in w and "was reused" in w for w in res["warnings"])
    assert proc.is_running() and pidfile.exists()  # not ours: neither the process nor its evidence removed


@pytest.mark.parametrize("value, says", [("lots", "threshold_mib"), ("1 GiB", "threshold_mib"), (-5, "threshold_mib")])
def test_threshold_that_is_not_a_number_is_rejected(gpu, tmp_path, value, says):
    tree, pidfile = start_server(gpu, tmp_path)
    res = run_module(base_args(gpu, pidfile, threshold_mib=value), tmp_path)
    assert res["failed"] and says in res["msg"]
    assert all(p.is_running() for p in tree.procs.values()) and os.path.exists(pidfile)


def test_host_without_driver_is_skipped_with_a_clear_message(gpu, tmp_path):
    gpu.configure(driver=False)
    res = run_module(base_args(gpu, str(tmp_path / "x.pid")), tmp_path)
    assert res["skipped"] and not res["changed"] and not res["failed"]
    assert "couldn't communicate with the NVIDIA driver" in res["msg"]
    res = run_module(base_args(gpu, str(tmp_path / "x.pid"), nvidia_smi="/nonexistent/nvidia-smi"), tmp_path)
    assert res["skipped"] and "does not exist" in res["msg"]


def test_holders_hidden_from_nvidia_smi_are_found_by_the_fd_scan(gpu, tmp_path):
    node = {"name": "top", "device": True, "children": [{"name": "engine", "mib": 4096, "hidden": True, "device": True}]}
    tree, pidfile = start_server(gpu, tmp_path, node)
    foreign = gpu.start({"name": "container-job", "mib": 2048, "hidden": True, "device": True})
    assert gpu.smi("--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv,noheader,nounits") == ""
    found, _ = scan_device_fds(gpu.device_prefix)
    assert {tree.pids["top"], tree.pids["engine"], foreign.pids["container-job"]} <= set(found)
    res = run_module(base_args(gpu, pidfile, timeout_s=1), tmp_path)
    assert res["fd_scan"]["used"]
    assert all(gone(p) for p in tree.procs.values())
    assert res["failed"] and f"pid {foreign.pids['container-job']}" in res["msg"]  # its MiB unknown: waited
    assert [f["source"] for f in res["foreign"]] == ["fd-scan"]
    assert foreign.procs["container-job"].is_running()


def test_memory_held_by_an_invisible_process_fails_after_the_timeout(gpu, tmp_path):
    gpu.start({"name": "elsewhere", "mib": 3000, "hidden": True})
    t0 = time.monotonic()
    res = run_module(base_args(gpu, str(tmp_path / "x.pid"), timeout_s=1), tmp_path)
    assert res["failed"] and "no holder is visible from here" in res["msg"]
    assert 1 <= time.monotonic() - t0 < 10


def test_keep_running_leaves_a_running_server_alone(gpu, tmp_path):
    tree, pidfile = start_server(gpu, tmp_path)
    res = run_module(base_args(gpu, pidfile, keep_running=True), tmp_path)
    assert not res["failed"] and not res["changed"], res["msg"]
    assert "left the running managed server" in res["msg"]
    assert all(p.is_running() for p in tree.procs.values()) and os.path.exists(pidfile)


def test_orphans_of_a_killed_top_are_stopped_because_the_pidfile_recorded_them(gpu, tmp_path):
    tree, pidfile = start_server(gpu, tmp_path, {"name": "api", "children": [{"name": "engine", "mib": 43628}]})
    tree.procs["api"].kill()  # what `kill -9 <top pid>` does to vLLM: the engine keeps the GPU
    tree.popen.wait(5)
    assert tree.procs["engine"].is_running() and gpu.used_mib() == 43628
    res = run_module(base_args(gpu, pidfile), tmp_path)
    assert not res["failed"] and res["changed"], res["msg"]
    assert gone(tree.procs["engine"]) and gpu.used_mib() == 0


def test_gpus_argument_limits_which_gpus_must_be_free(gpu, tmp_path):
    gpu.configure(gpus=[{"name": "NVIDIA H200"}, {"name": "NVIDIA H200"}])
    other = gpu.start({"name": "on-gpu1", "mib": 5000, "gpu": 1})
    res = run_module(base_args(gpu, str(tmp_path / "x.pid"), gpus=[0]), tmp_path)
    assert not res["failed"] and [g["index"] for g in res["gpus"]] == [0]
    res = run_module(base_args(gpu, str(tmp_path / "x.pid")), tmp_path)
    assert res["failed"] and "GPU 1 has 5000 MiB used" in res["msg"]
    assert other.procs["on-gpu1"].is_running()


def test_a_process_title_padded_with_blanks_reads_as_ps_shows_it():
    """Seen on the H200: vLLM's EngineCore sets its title over its old argv ("VLLM::EngineCore" and a run of
    blanks), which made the foreign-holder message end in a wall of spaces."""
    from dflash_host.host.gpu_holders import describe_holders

    text = describe_holders([{"pid": 6611, "user": "root", "gpu": 0, "mib": 15012,
                              "cmdline": ["VLLM::EngineCore" + " " * 200]}])
    assert text == "pid 6611 (user root, GPU 0, 15012 MiB): VLLM::EngineCore"
