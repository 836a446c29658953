"""The host agent (`python3 -m dflash_host.monitor`, dflash_host/monitor/) and its one-shot module library/host_metrics
on real processes: a stand-in nvidia-smi (tests/fakes/nvidia-smi) whose memory is held by live holder processes, a
server tree recorded in a real pidfile, the launch record beside it. The textfile says what the host is: GPU memory,
whether the tool's server runs, the k (and schedule) it runs with; a hung nvidia-smi is cut at the period; a file
that is not the tool's is refused; through the engine a second run changes nothing."""

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

from dflash_host.host.processes import write_pidfile
from dflash_host.monitor.textfile import TEXTFILE_NAME
from dflash_host.vllm.records import dump, paths
from tests.fakes.gpu_holder import SERVER_TREE
from tests.helpers import play

ROOT = Path(__file__).resolve().parents[2]
SCHEDULE = [[1, 8, 3], [9, 64, 1]]


def agent(root: Path, folder: Path, smi: str, *more: str, timeout: float = 60) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "dflash_host.monitor", "--dfp-root", str(root), "--textfile-dir", str(folder),
            "--nvidia-smi", smi, *more]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def samples(folder: Path) -> dict:
    """{series as written: value} of the agent's textfile."""
    lines = (folder / TEXTFILE_NAME).read_text().splitlines()
    return {ln.rsplit(" ", 1)[0]: float(ln.rsplit(" ", 1)[1]) for ln in lines if not ln.startswith("#")}


def serve(gpu, root: Path, k: int = 3, schedule: list | None = None) -> object:
    """A vLLM-like holder tree as the tool's server: its pidfile, the launch it was started from, running.json."""
    tree = gpu.start(SERVER_TREE)
    p = paths(str(root / "run" / "vllm.pid"))
    write_pidfile(p["pidfile"], tree.procs["top"])
    gpu.release()
    spec = {"method": "dflash", "model": str(root / "models" / "dflash"), "num_speculative_tokens": k}
    if schedule:
        spec["num_speculative_tokens_per_batch_size"] = schedule
    Path(p["launch"]).write_bytes(dump({"fingerprint": "f1", "launch_id": "l1", "argv": ["vllm"], "env_file": p["env"],
                                        "mode": "pidfile", "speculative": spec}))
    Path(p["running"]).write_bytes(dump({"fingerprint": "f1", "pid": tree.procs["top"].pid, "mode": "pidfile",
                                         "started_at": time.time()}))
    return tree


GPU = 'gpu="0",uuid="GPU-5f3c2a8e-0000-4000-8000-000000000000"'


def test_it_exports_the_gpu_memory_the_server_and_its_k(gpu, tmp_path):
    root, folder = tmp_path / "root", tmp_path / "textfile"
    tree = serve(gpu, root, k=3, schedule=SCHEDULE)
    done = agent(root, folder, gpu.nvidia_smi)
    assert done.returncode == 0, done.stderr
    got = samples(folder)
    assert got[f"dflash_gpu_memory_used_mib{{{GPU}}}"] == 3584 == gpu.used_mib()
    assert got[f"dflash_gpu_memory_total_mib{{{GPU}}}"] == 143771
    assert got["dflash_gpu_driver_up"] == 1 and got["dflash_server_running"] == 1
    assert got["dflash_running_num_speculative_tokens"] == 3
    assert got['dflash_running_schedule_num_speculative_tokens{batch_size_max="8",batch_size_min="1"}'] == 3
    assert got['dflash_running_schedule_num_speculative_tokens{batch_size_max="64",batch_size_min="9"}'] == 1
    # the server's top process dies, its workers keep the memory: held without a server, and no running k
    tree.procs["top"].kill()
    tree.popen.wait(timeout=10)
    assert agent(root, folder, gpu.nvidia_smi).returncode == 0
    got = samples(folder)
    assert got["dflash_server_running"] == 0 and got[f"dflash_gpu_memory_used_mib{{{GPU}}}"] == 3584
    assert "dflash_running_num_speculative_tokens" not in got


def test_a_relaunch_not_yet_started_exports_no_running_k(gpu, tmp_path):
    root, folder = tmp_path / "root", tmp_path / "textfile"
    serve(gpu, root, k=3)
    launch = paths(str(root / "run" / "vllm.pid"))["launch"]
    Path(launch).write_text(Path(launch).read_text().replace('"f1"', '"f2"'))  # rendered anew, not restarted yet
    assert agent(root, folder, gpu.nvidia_smi).returncode == 0
    got = samples(folder)
    assert got["dflash_server_running"] == 1 and "dflash_running_num_speculative_tokens" not in got


def test_a_launch_record_edited_by_hand_leaves_k_out_not_the_agent(gpu, tmp_path):
    root, folder = tmp_path / "root", tmp_path / "textfile"
    serve(gpu, root, k=3, schedule=SCHEDULE)
    launch = paths(str(root / "run" / "vllm.pid"))["launch"]
    record = json.loads(Path(launch).read_text())
    record["speculative"].update(num_speculative_tokens="3", num_speculative_tokens_per_batch_size=[[1, 8, 3], [9, "all", 1]])
    Path(launch).write_bytes(dump(record))
    done = agent(root, folder, gpu.nvidia_smi)
    assert done.returncode == 0, done.stderr
    got = samples(folder)
    assert got["dflash_server_running"] == 1 and not [s for s in got if s.startswith("dflash_running_")], got


def test_without_a_driver_it_says_so_and_still_exports_the_server(gpu, tmp_path):
    gpu.configure(driver=False)
    folder = tmp_path / "textfile"
    done = agent(tmp_path / "never-provisioned", folder, gpu.nvidia_smi)
    assert done.returncode == 0, done.stderr
    assert samples(folder) == {"dflash_gpu_driver_up": 0, "dflash_server_running": 0}
    assert "couldn't communicate with the NVIDIA driver" in done.stderr and "Traceback" not in done.stderr


def test_a_file_that_is_not_the_tools_is_refused_untouched(gpu, tmp_path):
    folder = tmp_path / "textfile"
    folder.mkdir()
    (folder / TEXTFILE_NAME).write_text("node_custom_metric 1\n")
    done = agent(tmp_path / "root", folder, gpu.nvidia_smi)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "was not written by dflash-provision" in done.stderr and "--textfile-dir" in done.stderr
    assert (folder / TEXTFILE_NAME).read_text() == "node_custom_metric 1\n"


@pytest.mark.parametrize("every, says", [("0", "from 1 to 86400"), ("soon", "invalid float value")])
def test_a_bad_period_is_one_clear_line(gpu, tmp_path, every, says):
    done = agent(tmp_path / "root", tmp_path / "textfile", gpu.nvidia_smi, "--every", every)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr


def test_the_loop_cuts_a_hung_nvidia_smi_at_its_period_and_stops_on_sigterm(tmp_path):
    hung = tmp_path / "nvidia-smi"
    hung.write_text("#!/bin/sh\nexec sleep 600\n")
    hung.chmod(0o755)
    folder = tmp_path / "textfile"
    argv = [sys.executable, "-m", "dflash_host.monitor", "--dfp-root", str(tmp_path / "root"), "--textfile-dir",
            str(folder), "--nvidia-smi", str(hung), "--every", "1"]
    began = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        while not (folder / TEXTFILE_NAME).exists():
            assert proc.poll() is None and time.monotonic() - began < 20, "no textfile within 20 s"
            time.sleep(0.1)
        assert time.monotonic() - began < 10  # the 600 s sleep was cut at the 1 s period
        assert samples(folder)["dflash_gpu_driver_up"] == 0
        first = (folder / TEXTFILE_NAME).stat().st_mtime_ns
        deadline = time.monotonic() + 15
        while (folder / TEXTFILE_NAME).stat().st_mtime_ns == first:  # a second period writes again
            assert time.monotonic() < deadline, "the loop wrote only once"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        said = proc.stderr.read() if proc.stderr else ""
        assert said.count("did not answer within 1 s") == 1, said  # said once, not every period
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert not [n for n in os.listdir(folder) if n.startswith(".tmp-")]
    assert not [c for c in psutil.process_iter(["cmdline"]) if str(hung) in " ".join(c.info["cmdline"] or [])]


HOST_METRICS = """- hosts: all
  gather_facts: false
  pre_tasks: [{import_role: {name: common, tasks_from: variables}}]
  tasks:
    - host_metrics: {}
      register: wrote
"""


def test_the_module_through_the_engine_writes_once_then_changes_nothing(gpu, tmp_path, inventory_file):
    root = tmp_path / "root"
    serve(gpu, root, k=5)
    inv = inventory_file(local=True, host_vars={"local": {"dfp_root": str(root), "nvidia_smi": gpu.nvidia_smi}})
    first = play(HOST_METRICS, inv, tmp_path)
    assert first.exit_code == 0 and first.recap["local"]["changed"] == 1, first.tasks
    got = samples(root / "metrics")
    assert got["dflash_running_num_speculative_tokens"] == 5 and got["dflash_server_running"] == 1
    again = play(HOST_METRICS, inv, tmp_path)
    assert again.exit_code == 0 and again.recap["local"]["changed"] == 0, again.tasks


def test_serving_bench_refreshes_the_agents_textfile(gpu, tmp_path, inventory_file):
    """The serving-bench playbook (built-in load generator against the stand-in vLLM) ends with host_metrics."""
    from tests.fakes.served import PLAYBOOKS, SERVICE, msgs, paths_of, server_vars
    from tests.fakes.vllm_processes import kill_leftovers

    hv = server_vars(tmp_path, nvidia_smi=gpu.nvidia_smi)
    inv = inventory_file(local=True, host_vars={"local": hv})
    try:
        assert play(SERVICE, inv, tmp_path).exit_code == 0
        bench = play("serving-bench", inv, tmp_path, extra_vars={
            "speed_load_generator": "builtin", "speed_workload": "random", "speed_concurrency": [1],
            "speed_requests": 2, "speed_max_tokens": 8})
        assert bench.exit_code == 0, msgs(bench)
        got = samples(Path(hv["dfp_root"]) / "metrics")
        assert got["dflash_server_running"] == 1 and got["dflash_running_num_speculative_tokens"] == 3, got
        assert got[f"dflash_gpu_memory_used_mib{{{GPU}}}"] == 0
    finally:
        play(PLAYBOOKS / "teardown.yaml", inv, tmp_path)
        kill_leftovers([paths_of(hv)["logs"]])


NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"


@pytest.mark.skipif(not os.access(NODE_EXPORTER, os.X_OK) and not os.environ.get("CI"),
                    reason="no prometheus-node-exporter here (Debian's package; .ci/run installs it)")
def test_node_exporters_textfile_collector_reads_the_agents_file(gpu, tmp_path):
    """Debian's node_exporter (textfile collector only) exports the agent's series as written, without a parse error."""
    import urllib.request

    from tests.fakes.vllm_processes import free_port

    root, folder = tmp_path / "root", tmp_path / "textfile"
    serve(gpu, root, k=3, schedule=SCHEDULE)
    assert agent(root, folder, gpu.nvidia_smi).returncode == 0
    port = free_port()
    exporter = subprocess.Popen([NODE_EXPORTER, "--collector.disable-defaults", "--collector.textfile",
                                 f"--collector.textfile.directory={folder}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        text, deadline = "", time.monotonic() + 20
        while "dflash_server_running" not in text:
            assert exporter.poll() is None and time.monotonic() < deadline, "node_exporter did not serve the textfile"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:  # noqa: S310
                    text = resp.read().decode()
            except OSError:
                time.sleep(0.2)
    finally:
        exporter.terminate()
        exporter.wait(timeout=10)
    lines = set(text.splitlines())
    assert "node_textfile_scrape_error 0" in lines
    assert f"dflash_gpu_memory_used_mib{{{GPU}}} 3584" in lines and "dflash_server_running 1" in lines
    assert 'dflash_running_schedule_num_speculative_tokens{batch_size_max="64",batch_size_min="9"} 1' in lines


PROMETHEUS = "/usr/bin/prometheus"


@pytest.mark.slow
@pytest.mark.skipif(not all(os.access(p, os.X_OK) for p in (PROMETHEUS, NODE_EXPORTER)) and not os.environ.get("CI"),
                    reason="no prometheus / prometheus-node-exporter here (Debian's packages; .ci/run installs them)")
def test_prometheus_fires_the_leak_alert_from_the_agents_file(gpu, tmp_path):
    """End to end on real processes: the server's top process dies and its workers keep 3584 MiB; the agent writes
    that; node_exporter serves it; Prometheus, configured by `invoke monitoring`'s own files for a host without a GPU
    exporter, fires DflashGpuMemoryHeldWithoutServer for it."""
    import urllib.request

    from dfp_cli.monitoring.command import CONFIG_FILE, documents, write_documents
    from dfp_cli.monitoring.hosts import view_of
    from tests.fakes.vllm_processes import free_port
    from tests.monitoring.helpers import launch, record, registered

    root, folder, prom = tmp_path / "root", tmp_path / "textfile", tmp_path / "prom"
    tree = serve(gpu, root, k=3)
    tree.procs["top"].kill()
    tree.popen.wait(timeout=10)
    assert agent(root, folder, gpu.nvidia_smi).returncode == 0
    node_port, prom_port = free_port(), free_port()
    view = view_of("leaky", registered("127.0.0.1", record({1: "pays"}), launch(), vllm_port=free_port(),
                                       node_exporter_port=node_port, gpu_exporter_port=None, monitoring_window="30s",
                                       monitoring_for="1s", monitoring_scrape_interval="1s"), "gpu")
    write_documents(str(prom), documents([view]))
    started = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
               for argv in ([NODE_EXPORTER, "--collector.disable-defaults", "--collector.textfile",
                             f"--collector.textfile.directory={folder}", f"--web.listen-address=127.0.0.1:{node_port}"],
                            [PROMETHEUS, f"--config.file={prom / CONFIG_FILE}", f"--storage.tsdb.path={prom / 'data'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"])]
    try:
        firing, deadline = [], time.monotonic() + 90
        while not firing:
            assert all(p.poll() is None for p in started) and time.monotonic() < deadline, "no leak alert within 90 s"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/alerts", timeout=2) as resp:  # noqa: S310
                    firing = [a for a in json.load(resp)["data"]["alerts"]
                              if a["state"] == "firing" and a["labels"]["alertname"] == "DflashGpuMemoryHeldWithoutServer"]
            except OSError:
                pass
            time.sleep(0.5)
        assert firing[0]["labels"]["host"] == "leaky" and float(firing[0]["value"]) == 3584, firing
    finally:
        for p in started:
            p.terminate()
            p.wait(timeout=20)
