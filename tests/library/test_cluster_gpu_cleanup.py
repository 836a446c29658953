"""gpu-cleanup on a serving cluster's node: the headless vLLM's workers are the managed server's (the pidfile's
recorded tree) even orphaned by a kill -9 of the node's main process, so they are stopped and their GPU memory
freed; a process the tool did not start stays a foreign holder, listed and left alone. Stand-in vLLM nodes
(tests/fakes/fake_vllm.py) and a stand-in nvidia-smi whose holders are those real processes."""

from __future__ import annotations

import os
import signal
import time

from library import gpu_cleanup
from tests.fakes.gpu_holder import FakeGpu, start_ticks, write_json
from tests.library.test_vllm_cluster import alive, call, nodes  # noqa: F401  (nodes: the fixture)


def test_a_dead_nodes_orphaned_workers_are_stopped_and_a_foreign_holder_is_left(nodes, tmp_path):  # noqa: F811
    worker, head = nodes(1), nodes(0)
    up = worker.up()
    assert not head.up()["failed"]
    verified = worker.cluster_call("verify", wait_s=5)
    assert not verified["failed"], verified["msg"]
    orphans = [w["pid"] for w in verified["local_workers"]]

    (tmp_path / "gpu").mkdir()
    gpu = FakeGpu(root=str(tmp_path / "gpu"))
    try:
        for pid in orphans:  # each worker holds GPU memory, as vLLM's workers do
            write_json(os.path.join(gpu.registry, "holders", f"{pid}.json"),
                       {"pid": pid, "start_ticks": start_ticks(pid), "mib": 8192, "gpu": 0})
        foreign = gpu.start({"name": "someone-elses-job", "mib": 4096})
        os.kill(up["pid"], signal.SIGKILL)  # the node's main process alone: its workers are orphaned
        time.sleep(0.3)
        assert alive(orphans) == orphans

        res = call(gpu_cleanup, {"pidfile": str(worker.pidfile), "nvidia_smi": gpu.nvidia_smi, "grace_s": 0.5,
                                   "timeout_s": 3, "device_prefix": gpu.device_prefix})
        assert res["failed"], res["msg"]  # the foreign holder keeps the GPU busy
        assert not alive(orphans), res["msg"]  # ... but the node's workers were the tool's, and are gone
        assert f"pid {foreign.pids['someone-elses-job']}" in res["msg"] and "does not manage" in res["msg"]
        assert foreign.procs["someone-elses-job"].is_running()
    finally:
        gpu.cleanup()
