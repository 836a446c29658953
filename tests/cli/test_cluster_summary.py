"""`invoke status --group cluster` prints each node of a serving cluster as what it is: the head (the API) or a
headless node, its rank, and how many local workers run and joined the head (vllm_status's report)."""

from __future__ import annotations

from dfp_cli.summaries import render_summary

WORKER = {"pid": 17139, "connected": True, "name": "VLLM::Worker_TP1"}


def test_a_headless_node_is_shown_with_its_rank_and_joined_workers_not_a_port():
    data = {"running": True, "role": "worker", "rank": 1, "nnodes": 2, "pid": 17139, "uptime_s": 12.0,
            "health": "ok", "port": None, "local_workers": [WORKER]}
    text = render_summary("status", "h2", data)
    assert text.splitlines()[0] == "h2: RUNNING  (headless node, rank 1 of 2)"
    assert "local workers: 1 running, 1 joined to the head" in text and "port" not in text


def test_a_dead_node_says_not_running_with_its_rank():
    data = {"running": False, "role": "worker", "rank": 1, "nnodes": 2, "local_workers": [],
            "msg": "vLLM worker node rank 1 (headless): not running"}
    assert render_summary("status", "h2", data).splitlines()[0] == "h2: NOT RUNNING  (headless node, rank 1 of 2)"


def test_the_head_keeps_the_server_lines_and_adds_its_workers():
    data = {"running": True, "role": "head", "rank": 0, "nnodes": 2, "pid": 17235, "port": 8000, "uptime_s": 30.0,
            "health": "ok", "served_model": "tiny-target", "acceptance_rate": 0.0, "mean_acceptance_length": 1.0,
            "local_workers": [dict(WORKER, connected=False)]}
    text = render_summary("status", "h1", data)
    assert text.splitlines()[0] == "h1: RUNNING  (head, rank 0 of 2)"
    assert "port 8000" in text and "serves:  tiny-target" in text
    assert "local workers: 1 running, 0 joined to the head" in text


def test_a_single_host_server_is_printed_as_before():
    data = {"running": True, "pid": 5, "port": 8000, "uptime_s": 1.0, "health": "ok", "served_model": "t"}
    text = render_summary("status", "gpu1", data)
    assert text.splitlines()[0] == "gpu1: RUNNING" and "local workers" not in text


def test_speed_advice_for_a_cluster_names_what_a_cluster_can_run():
    head = {"running": True, "role": "head", "rank": 0, "nnodes": 2, "pid": 1, "port": 8000, "health": "ok",
            "local_workers": [WORKER], "speed": {}}
    text = render_summary("status", "h1", head)
    assert "speed-up: not measured (speedup_gate: warn, then invoke serving-cluster)" in text and "tune" not in text
    worker = {"running": True, "role": "worker", "rank": 1, "nnodes": 2, "pid": 2, "health": "ok",
              "local_workers": [WORKER], "speed": {}}
    assert "speed-up" not in render_summary("status", "h2", worker)


def test_the_gate_advises_tune_on_one_host_and_serving_cluster_on_a_cluster():
    from dflash_host.speed.speedup import gate

    one = gate(0.7, 1.0, "warn")[1]
    many = gate(0.7, 1.0, "warn", cluster=True)[1]
    assert "invoke tune" in one and "invoke tune" not in many and "invoke serving-cluster --group" in many
