"""A serving cluster never starts on part of its hosts: a node that cannot be reached, or whose GPU a foreign
process keeps busy, stops the play on every host before any vLLM starts (any_errors_fatal), naming the node.
A cluster group left partly out of the run, or a layout the hosts cannot hold, is refused before anything
starts. Real sshd hosts; the GPU is a stand-in nvidia-smi whose holder is a real process (tests/fakes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.api import run_playbook
from tests.fakes.vllm_processes import free_port

pytestmark = pytest.mark.ssh

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "serving-cluster.yaml"
GPU_STOP = "Stop the managed server's whole process tree and wait until GPU memory is free"
LAYOUT = "Check that the whole cluster is in this run and its layout fits the hosts"


def cluster(inventory_file, hosts, tmp_path: Path, node_vars: dict | None = None, **group_vars):
    names = [h.name for h in hosts]
    per_host = {h.name: {"dfp_root": str(tmp_path / h.name), "nvidia_smi": "/nonexistent/nvidia-smi"} for h in hosts}
    per_host[names[-1]].update(node_vars or {})
    vars = {"vllm_flavor": "none", "generate_tiny_models": False, "vllm_port": free_port(), **group_vars}
    return inventory_file(hosts=hosts, vars=vars, host_vars=per_host, groups={"cluster": names})


def stopped_msgs(res) -> dict:
    return {r.host: r.msg for r in res.find("Play stopped")}


def no_vllm_task_ran(res) -> bool:
    return not [t for t in res.tasks if t["task"].startswith(("Start the head", "Start the headless", "Render this node"))]


def test_an_unreachable_node_stops_the_cluster_before_anything_runs(inventory_file, ssh_hosts, shared_tmp):
    head, node = ssh_hosts[0], ssh_hosts[1]
    inv = cluster(inventory_file, [head, node], shared_tmp, node_vars={"ansible_port": 1})
    res = run_playbook(str(PLAYBOOK), inventory=str(inv), limit="cluster")
    assert res.exit_code != 0
    assert f"host {node.name} was unreachable" in stopped_msgs(res)[head.name]
    assert no_vllm_task_ran(res) and not (shared_tmp / head.name / "run").exists()


def test_a_foreign_gpu_holder_on_a_node_stops_the_cluster_naming_it(inventory_file, ssh_hosts, shared_tmp, gpu):
    head, node = ssh_hosts[0], ssh_hosts[1]
    foreign = gpu.start({"name": "someone-elses-job", "mib": 4096})  # root's: never the ssh user's to stop
    inv = cluster(inventory_file, [head, node], shared_tmp, node_vars={"nvidia_smi": gpu.nvidia_smi,
                                                                      "gpu_cleanup_timeout_s": 2})
    res = run_playbook(str(PLAYBOOK), inventory=str(inv), limit="cluster")
    assert res.exit_code == 2
    failed = res.find(GPU_STOP, node.name)[-1]
    assert failed.status == "failed" and str(foreign.pids["someone-elses-job"]) in failed.msg
    assert f"host {node.name} failed task" in stopped_msgs(res)[head.name]
    assert no_vllm_task_ran(res) and foreign.procs["someone-elses-job"].is_running()


def test_a_cluster_partly_left_out_by_limit_is_refused(inventory_file, ssh_hosts, shared_tmp):
    head, node = ssh_hosts[0], ssh_hosts[1]
    inv = cluster(inventory_file, [head, node], shared_tmp)
    res = run_playbook(str(PLAYBOOK), inventory=str(inv), limit=node.name)
    assert res.exit_code == 2
    refused = res.find(LAYOUT, node.name)[-1]
    assert refused.status == "failed" and "--group cluster" in refused.msg
    assert no_vllm_task_ran(res)


def test_a_layout_the_hosts_cannot_hold_is_refused(inventory_file, ssh_hosts, shared_tmp):
    head, node = ssh_hosts[0], ssh_hosts[1]
    inv = cluster(inventory_file, [head, node], shared_tmp, tensor_parallel_size=3, pipeline_parallel_size=1)
    res = run_playbook(str(PLAYBOOK), inventory=str(inv), limit="cluster")
    assert res.exit_code == 2
    assert "3 x 1" in res.find(LAYOUT, head.name)[-1].msg
    assert no_vllm_task_ran(res)


def test_a_cluster_group_the_inventory_lacks_is_refused_naming_it(inventory_file, ssh_hosts, shared_tmp):
    head, node = ssh_hosts[0], ssh_hosts[1]
    inv = cluster(inventory_file, [head, node], shared_tmp, cluster_group="gpu-cluster")
    res = run_playbook(str(PLAYBOOK), inventory=str(inv), limit="cluster")
    assert res.exit_code == 2
    refused = res.find(LAYOUT, head.name)[-1]
    assert refused.status == "failed" and "the group 'gpu-cluster' ()" in refused.msg, refused.msg
    assert no_vllm_task_ran(res)
