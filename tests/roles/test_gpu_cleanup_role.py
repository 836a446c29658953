"""The gpu-cleanup role through the engine, over `local` and a real sshd, on real process trees that a
stand-in nvidia-smi reports as GPU holders: kills exactly the managed tree, waits for the memory,
runs twice with no change, fails (listing them) on foreign holders that keep the GPU busy, which survive."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import psutil
import pytest

from dflash_host.host.processes import write_pidfile
from tests.fakes.gpu_holder import SERVER_TREE, FakeGpu
from tests.helpers import play

STOP = "Stop the managed server's whole process tree and wait until GPU memory is free"
SAY = "Say why there is no GPU to free on this host"
PLAYBOOK = """\
- name: gpu cleanup
  hosts: all
  pre_tasks:
    - import_role: {name: common, tasks_from: variables}
  roles:
    - gpu-cleanup
"""
TREE = SERVER_TREE  # a vLLM-like tree: tests/fakes/gpu_holder.py


def role_vars(gpu: FakeGpu, pidfile: Path, **extra) -> dict:
    v = {
        "nvidia_smi": gpu.nvidia_smi,
        "vllm_pidfile": str(pidfile),
        "gpu_cleanup_grace_s": 0.5,
        "gpu_cleanup_timeout_s": 5,
    }
    v.update(extra)
    return v


def start_server(gpu: FakeGpu, pidfile: Path, user: str | None = None):
    tree = gpu.start(TREE, user=user)
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    write_pidfile(str(pidfile), tree.procs["top"])
    if user:
        pw = pwd.getpwnam(user)
        for path in (pidfile.parent, pidfile):
            os.chown(path, pw.pw_uid, pw.pw_gid)
    gpu.release()  # the detached child is orphaned: only the pidfile's tree proves it is ours
    return tree


def gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def stop_result(res, host: str) -> dict:
    [r] = res.find(STOP, host)
    return r


# ---------------------------------------------------------------- local


def test_role_frees_the_gpu_on_local_and_a_second_run_changes_nothing(tmp_path, inventory_file, gpu):
    pidfile = tmp_path / "run" / "vllm.pid"
    tree = start_server(gpu, pidfile)
    inv = inventory_file(local=True, vars=role_vars(gpu, pidfile))
    res = play(PLAYBOOK, inv, tmp_path)
    assert res.exit_code == 0, res.tasks
    r = stop_result(res, "local")
    assert r.status == "changed"
    assert r.result["gpus"][0]["before_mib"] == 3584 and r.result["gpus"][0]["after_mib"] == 0
    assert all(gone(p) for p in tree.procs.values())
    assert not pidfile.exists()
    again = play(PLAYBOOK, inv, tmp_path)
    assert again.exit_code == 0 and again.recap["local"]["changed"] == 0, again.tasks


def test_role_check_mode_lists_what_would_be_stopped(tmp_path, inventory_file, gpu):
    pidfile = tmp_path / "run" / "vllm.pid"
    tree = start_server(gpu, pidfile)
    res = play(PLAYBOOK, inventory_file(local=True, vars=role_vars(gpu, pidfile)), tmp_path, check=True)
    assert res.exit_code == 0, res.tasks
    r = stop_result(res, "local")
    assert r.status == "changed" and set(r.result["would_stop"]) == set(tree.pids.values())
    assert all(p.is_running() for p in tree.procs.values())


def test_role_fails_listing_a_foreign_holder_that_keeps_the_gpu_busy_and_leaves_it(tmp_path, inventory_file, gpu):
    pidfile = tmp_path / "run" / "vllm.pid"
    tree = start_server(gpu, pidfile)
    foreign = gpu.start({"name": "foreign", "mib": 4096})
    res = play(PLAYBOOK, inventory_file(local=True, vars=role_vars(gpu, pidfile)), tmp_path)
    assert res.exit_code == 2
    r = stop_result(res, "local")
    assert r.status == "failed"
    assert f"pid {foreign.pids['foreign']} (user root, GPU 0, 4096 MiB)" in r.msg
    assert foreign.procs["foreign"].is_running()
    assert all(gone(p) for p in tree.procs.values())


def test_role_skips_with_the_reason_on_a_host_without_driver(tmp_path, inventory_file, gpu):
    gpu.configure(driver=False)
    res = play(PLAYBOOK, inventory_file(local=True, vars=role_vars(gpu, tmp_path / "vllm.pid")), tmp_path)
    assert res.exit_code == 0, res.tasks
    [say] = res.find(SAY, "local")
    assert "couldn't communicate with the NVIDIA driver" in say.msg
    assert stop_result(res, "local").status == "skipped"
    assert res.recap["local"]["changed"] == 0


# ---------------------------------------------------------------- over real SSH


@pytest.mark.ssh
def test_role_over_ssh_kills_exactly_the_users_tree_and_a_second_run_changes_nothing(
    tmp_path, inventory_file, gpu, ssh_host, shared_tmp
):
    pidfile = shared_tmp / "run" / "vllm.pid"
    tree = start_server(gpu, pidfile, user=ssh_host.user)
    bystander = gpu.start({"name": "bystander", "mib": 200}, user=ssh_host.user)  # same user, not ours
    inv = inventory_file(hosts=[ssh_host], vars=role_vars(gpu, pidfile))
    res = play(PLAYBOOK, inv, tmp_path)
    assert res.exit_code == 0, res.tasks
    r = stop_result(res, ssh_host.name)
    assert r.status == "changed", r.msg
    assert all(gone(p) for p in tree.procs.values())
    assert bystander.procs["bystander"].is_running()
    assert [f["pid"] for f in r.result["foreign"]] == [bystander.pids["bystander"]]
    assert not pidfile.exists()
    again = play(PLAYBOOK, inv, tmp_path)
    assert again.exit_code == 0 and again.recap[ssh_host.name]["changed"] == 0, again.tasks


@pytest.mark.ssh
def test_role_over_ssh_never_stops_another_users_holder_even_when_named(tmp_path, inventory_file, gpu, ssh_host, shared_tmp):
    pidfile = shared_tmp / "run" / "vllm.pid"
    tree = start_server(gpu, pidfile, user=ssh_host.user)
    foreign = gpu.start({"name": "root-job", "mib": 2048})  # root's: another user for the ssh user
    pid = foreign.pids["root-job"]
    inv = inventory_file(hosts=[ssh_host], vars=role_vars(gpu, pidfile, gpu_cleanup_kill_foreign=[pid]))
    res = play(PLAYBOOK, inv, tmp_path)
    assert res.exit_code == 2
    r = stop_result(res, ssh_host.name)
    assert f"pid {pid} (user root, GPU 0, 2048 MiB)" in r.msg
    assert "belongs to another user" in r.result["foreign"][0]["reason"]
    assert foreign.procs["root-job"].is_running()
    assert all(gone(p) for p in tree.procs.values())


def test_role_rejects_a_threshold_that_is_not_a_number_and_kills_nothing(tmp_path, inventory_file, gpu):
    pidfile = tmp_path / "run" / "vllm.pid"
    tree = start_server(gpu, pidfile)
    inv = inventory_file(local=True, vars=role_vars(gpu, pidfile, gpu_free_threshold_mib="1 GiB"))
    res = play(PLAYBOOK, inv, tmp_path)
    assert res.exit_code == 2
    r = stop_result(res, "local")
    assert r.status == "failed" and "threshold_mib" in r.msg and "1 GiB" in r.msg
    assert all(p.is_running() for p in tree.procs.values()) and pidfile.exists()


@pytest.mark.ssh
def test_role_over_ssh_says_so_when_the_server_belongs_to_another_user(tmp_path, inventory_file, gpu, ssh_host, shared_tmp):
    pidfile = shared_tmp / "run" / "vllm.pid"
    tree = gpu.start({"name": "root-server", "children": [{"name": "engine", "mib": 2048}]})  # started by root
    pidfile.parent.mkdir()
    write_pidfile(str(pidfile), tree.procs["root-server"])
    res = play(PLAYBOOK, inventory_file(hosts=[ssh_host], vars=role_vars(gpu, pidfile)), tmp_path)
    assert res.exit_code == 2
    r = stop_result(res, ssh_host.name)
    assert "could not be signalled" in r.msg and "run the play as the server's user or as root" in r.msg
    assert all(p.is_running() for p in tree.procs.values())
