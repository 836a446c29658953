"""The serving-cluster role through the engine on two local hosts (own dfp_root each) whose vLLM is the stand-in
(tests/fakes/fake_vllm.py acts as vLLM's multi-node launcher: the head's rank-0 worker listens on the master
port, the headless node's workers connect to it). What the real-vLLM test (tests/cluster) costs minutes for, in
seconds: the restart decisions (nothing, a changed launch, a dead node, cluster_restart), a head that does not
start, check mode."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest
import yaml

from tests.fakes.served import PLAYBOOKS, fake_env, make_models, msgs, result_of
from tests.fakes.vllm_processes import free_port, kill_leftovers, session_alive
from tests.helpers import play

BOOK = """\
- name: cluster
  hosts: all
  any_errors_fatal: true
  gather_facts: true
  roles:
    - common
    - serving-cluster
"""
HEAD_START = "Start the head, wait until every node joined, then prove it serves and measure acceptance"
NODE_START = "Start the headless nodes (they wait for the head)"
VERIFY = "Verify every node's ranks are running and joined to the head"


@pytest.fixture
def cluster(tmp_path):
    """write(head={...}, node={...}, **group vars) -> inventory of hosts `head` and `node` (group cluster)."""
    roots = {h: tmp_path / h for h in ("head", "node")}

    def write(head: dict | None = None, node: dict | None = None, **group) -> Path:
        hosts = {}
        for name, extra in (("head", head), ("node", node)):
            hv = {"ansible_connection": "local", "dfp_root": str(roots[name] / "dflash"), "cluster_node_address": "127.0.0.1"}
            if not (roots[name] / "models").exists():
                make_models(roots[name])
            hv.update(target_model=str(roots[name] / "models" / "target"), drafter_model=str(roots[name] / "models" / "dflash"))
            hosts[name] = dict(hv, **(extra or {}))
        vars = {"venv_python": "/usr/bin/python3", "served_model_name": "tiny", "vllm_port": ports["api"],
                "vllm_flavor": "cpu", "num_speculative_tokens": 3, "vllm_env": fake_env(), "readiness_timeout_s": 20,
                "vllm_stop_grace_s": 5, "smoke_max_tokens": 8, "acceptance_gate": "warn",
                "nvidia_smi": "/nonexistent/nvidia-smi", "tensor_parallel_size": 2, "pipeline_parallel_size": 1,
                "cluster_master_port": ports["master"], "vllm_host": "127.0.0.1"}
        vars.update(group)
        inv = tmp_path / "inv.yaml"
        inv.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": vars,
                                               "children": {"cluster": {"hosts": {"head": None, "node": None}}}}}))
        return inv

    ports = {"api": free_port(), "master": free_port()}
    write.roots = roots  # type: ignore[attr-defined]
    yield write
    leaked = kill_leftovers([r / "dflash" / "logs" for r in roots.values()])
    assert not leaked, f"stand-in vLLM processes survived: {leaked}"


def run(inv: Path, tmp_path: Path, **kw):
    return play(BOOK, inv, tmp_path, **kw)


def pids(res) -> tuple:
    return result_of(res, HEAD_START, "head")["pid"], result_of(res, NODE_START, "node")["pid"]


def test_forms_then_changes_nothing_then_restarts_once_for_a_change_a_dead_node_or_when_asked(cluster, tmp_path):
    inv = cluster()
    first = run(inv, tmp_path)
    assert first.exit_code == 0, [(t["host"], t["task"], t["msg"][:300]) for t in first.tasks if t["status"] == "failed"]
    head_pid, node_pid = pids(first)
    assert result_of(first, VERIFY, "node")["local_workers"][0]["connected"]

    again = run(inv, tmp_path)
    assert again.exit_code == 0 and again.recap["head"]["changed"] == 0 and again.recap["node"]["changed"] == 0, msgs(again)
    assert pids(again) == (head_pid, node_pid)

    changed = run(cluster(max_num_seqs=8), tmp_path)  # a flag of every node's launch: the cluster restarts once
    assert changed.exit_code == 0, msgs(changed)
    head_pid2, node_pid2 = pids(changed)
    assert head_pid2 != head_pid and node_pid2 != node_pid

    os.kill(node_pid2, signal.SIGKILL)  # the node's main process dies after readiness
    healed = run(inv := cluster(max_num_seqs=8), tmp_path)
    assert healed.exit_code == 0, msgs(healed)
    head_pid3, node_pid3 = pids(healed)
    assert head_pid3 != head_pid2 and node_pid3 != node_pid2
    stale = [r for r in healed.find("Decide whether the cluster must be (re)started", "head")][-1]
    assert stale.status == "ok"

    asked = run(inv, tmp_path, extra_vars={"cluster_restart": True})
    assert asked.exit_code == 0, msgs(asked)
    assert set(pids(asked)).isdisjoint({head_pid3, node_pid3})

    down = play(PLAYBOOKS / "teardown.yaml", inv, tmp_path)
    assert down.exit_code == 0, msgs(down)
    assert not session_alive(pids(asked)[0]) and not session_alive(pids(asked)[1])


def test_a_head_that_does_not_start_stops_the_node_that_waits_for_it(cluster, tmp_path):
    inv = cluster(head={"vllm_env": fake_env("crash_start")})
    res = run(inv, tmp_path)
    assert res.exit_code == 2
    node_pid = result_of(res, NODE_START, "node")["pid"]
    failed = res.find("Fail when the cluster did not start (every node was stopped)", "node")[-1]
    assert failed.status == "failed" and "the head head did not start" in failed.msg
    assert not session_alive(node_pid)
    assert not psutil.pid_exists(node_pid) or psutil.Process(node_pid).status() == psutil.STATUS_ZOMBIE


def test_check_mode_on_a_new_cluster_starts_nothing_and_succeeds(cluster, tmp_path):
    inv = cluster()
    res = run(inv, tmp_path, check=True)
    assert res.exit_code == 0, msgs(res)
    for name in ("head", "node"):
        assert not (cluster.roots[name] / "dflash" / "run" / "vllm.pid").exists()


@pytest.mark.parametrize("book", ["provision", "restart-server", "rebuild"])
def test_a_one_host_playbook_on_a_cluster_node_is_refused_before_it_stops_anything(cluster, tmp_path, book):
    inv = cluster()
    up = run(inv, tmp_path)
    assert up.exit_code == 0, msgs(up)
    head_pid, node_pid = pids(up)
    res = play(PLAYBOOKS / f"{book}.yaml", inv, tmp_path, limit="node")
    assert res.exit_code == 2
    refused = res.find("Refuse a node of a serving cluster (one-host playbook)", "node")[-1]
    assert refused.status == "failed" and "node rank 1 of 2 (a headless node)" in refused.msg, refused.msg
    assert "invoke serving-cluster --group cluster" in refused.msg and "invoke teardown --host node" in refused.msg
    assert [t["task"] for t in res.tasks if t["host"] == "node" and t["status"] != "skipped"][-1] == refused.task
    assert session_alive(node_pid) and session_alive(head_pid)  # nothing was stopped
    again = run(inv, tmp_path)
    assert again.exit_code == 0 and pids(again) == (head_pid, node_pid), msgs(again)
    down = play(PLAYBOOKS / "teardown.yaml", inv, tmp_path)
    assert down.exit_code == 0, msgs(down)


def test_the_commands_a_person_types(cluster, tmp_path):
    """invoke play (the role's playbook: serving-cluster's own adds the environment build, which the stand-in
    does not need) --group cluster, invoke status --group cluster (each node as what it is; a dead node makes
    status exit 3, naming its rank), invoke teardown --group cluster: real processes."""
    from tests.fakes.served import invoke

    inv = str(cluster())
    book = tmp_path / "cluster.yaml"
    book.write_text(BOOK)
    up = invoke("play", str(book), "--group", "cluster", "-i", inv)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-2000:]
    assert "PLAY RECAP" in up.stdout and "2 hosts serve tiny" in up.stdout
    st = invoke("status", "--group", "cluster", "-i", inv)
    assert st.returncode == 0, st.stdout + st.stderr
    assert "head: RUNNING  (head, rank 0 of 2)" in st.stdout
    assert "node: RUNNING  (headless node, rank 1 of 2)" in st.stdout and "1 running, 1 joined to the head" in st.stdout
    node_pid = __import__("json").loads((cluster.roots["node"] / "dflash" / "run" / "vllm.pid").read_text())["pid"]
    os.killpg(node_pid, signal.SIGKILL)
    psutil.wait_procs([psutil.Process(node_pid)], timeout=5)
    dead = invoke("status", "--group", "cluster", "-i", inv)
    assert dead.returncode == 3 and "node: NOT RUNNING  (headless node, rank 1 of 2)" in dead.stdout, dead.stdout
    down = invoke("teardown", "--group", "cluster", "-i", inv)
    assert down.returncode == 0, down.stdout[-3000:]


GATE = "Speed gate: the drafter must not make the cluster slower"
# The stand-in vLLM serves /v1/completions only: random tokens; two short repetitions a level.
GATE_VARS = {"speedup_gate": "warn", "tune_concurrency": 1, "speed_requests": 2, "speed_max_tokens": 8,
             "speed_load_generator": "builtin", "speed_workload": "random", "speed_repetitions": 2, "speed_min_seconds": 0}


def test_the_speed_gate_measures_the_cluster_once_against_itself_without_the_drafter(cluster, tmp_path):
    inv = cluster(vllm_env=fake_env(token_s="0.004", token_s_spec="0.001"), **GATE_VARS)
    first = run(inv, tmp_path)
    assert first.exit_code == 0, msgs(first)
    gate = result_of(first, GATE, "head")
    assert gate["speedup"] and gate["speedup"] > 1 and gate["tokens_per_s"] > gate["baseline_tokens_per_s"], gate
    again = run(inv, tmp_path)
    assert again.exit_code == 0 and again.recap["head"]["changed"] == 0 and again.recap["node"]["changed"] == 0, msgs(again)
    assert result_of(again, GATE, "head")["speedup"] == gate["speedup"]  # the cached verdict
    assert play(PLAYBOOKS / "teardown.yaml", inv, tmp_path).exit_code == 0


def test_a_baseline_that_fails_brings_the_cluster_back_with_its_drafter_then_fails(cluster, tmp_path):
    inv = cluster(head={"vllm_env": fake_env(baseline_mode="crash_start")}, **GATE_VARS)
    res = run(inv, tmp_path)
    assert res.exit_code == 2
    failed = res.find("Fail when the cluster could not be measured without its drafter (it serves with its drafter "
                      "again)", "head")[-1]
    assert failed.status == "failed" and "brought back with its drafter" in failed.msg and "head:" in failed.msg
    back = result_of(res, "Start the head with the drafter again and prove it serves", "head")
    assert back["spec_decode"] and session_alive(back["pid"])
    probe = run(inv, tmp_path, check=True)  # the cluster runs its rendered launch (with the drafter) on both nodes
    assert [r.result["current"] for r in probe.find("Look at what this node runs now (the rendered launch, running, "
                                                    "or not)")] == [True, True]
    assert play(PLAYBOOKS / "teardown.yaml", inv, tmp_path).exit_code == 0


def test_a_headless_node_that_does_not_start_keeps_the_head_from_starting(cluster, tmp_path):
    inv = cluster(node={"vllm_env": fake_env("crash_start")})
    res = run(inv, tmp_path)
    assert res.exit_code == 2
    failed = res.find("Fail when the cluster did not start (every node was stopped)", "head")[-1]
    assert failed.status == "failed" and "1 headless node(s) did not start" in failed.msg, failed.msg
    assert res.find(HEAD_START, "head")[-1].status == "skipped"
