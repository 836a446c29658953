"""`invoke status --group gpu` (and -l): one line per host, `--json` a list, as a person types it.

Two local-connection hosts with their own dfp_root: gpu-a serves the stand-in vLLM (tests/fakes/fake_vllm.py, started
through the vllm-service role), gpu-b was never provisioned; each has a speed record written by the speed_record
module. The alerts column asks a real Prometheus (Debian's /usr/bin/prometheus, started here with a rule that fires
for gpu-a) over its HTTP API; without a prometheus_url, or with one that does not answer, the column says so and
the rest of the line stands."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from dflash_host.module import Context
from library import speed_record
from tests.cli.helpers import invoke
from tests.fakes.served import PLAYBOOKS, SERVICE, msgs, paths_of, server_vars
from tests.fakes.vllm_processes import free_port, kill_leftovers, stop_started
from tests.helpers import play

PROMETHEUS = "/usr/bin/prometheus"


def run_(c: int, tps: float) -> dict:
    return {"concurrency": c, "output_tokens_per_s": tps, "samples_tokens_per_s": [tps - 1, tps, tps + 1],
            "acceptance_rate": 0.5, "per_position_acceptance": [0.7, 0.5, 0.3], "mean_acceptance_length": 2.5}


def write_record(root: Path, k: int) -> None:
    """Measured in turns: the drafter pays at concurrency 1 (1.5x) and is slower at 16 (0.6x)."""
    args = {name: spec.get("default") for name, spec in speed_record.ARGS.items()}
    args.update(pidfile=str(root / "run" / "vllm.pid"), root=str(root), action="record", interleaved=True,
                runs=[run_(1, 150.0), run_(16, 60.0)], baseline_runs=[run_(1, 100.0), run_(16, 101.0)],
                num_speculative_tokens=k)
    speed_record.run(args, Context())


def fleet_inventory(tmp_path: Path, a_vars: dict, **all_vars) -> Path:
    b_root = tmp_path / "b" / "dflash"
    hosts = {"gpu-a": {"ansible_connection": "local", **a_vars},
             "gpu-b": {"ansible_connection": "local", "dfp_root": str(b_root), "nvidia_smi": "/nonexistent/nvidia-smi"}}
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": all_vars,
                                            "children": {"gpu": {"hosts": {"gpu-a": None, "gpu-b": None}}}}}))
    return path


@pytest.fixture
def fleet(tmp_path, gpu):
    """(inventory path writer, gpu-a's host vars) with gpu-a serving and both hosts' speed records written; gpu-a has
    the stand-in nvidia-smi (its server holds no GPU memory there: 0 MiB), gpu-b none (n/a)."""
    a_vars = server_vars(tmp_path / "a", nvidia_smi=gpu.nvidia_smi)
    inv = fleet_inventory(tmp_path, a_vars)
    up = play(SERVICE, inv, tmp_path, limit="gpu-a")
    try:
        assert up.exit_code == 0, msgs(up)
        write_record(Path(a_vars["dfp_root"]), 3)
        write_record(tmp_path / "b" / "dflash", 5)
        yield (lambda **all_vars: fleet_inventory(tmp_path, a_vars, **all_vars)), a_vars
    finally:
        play(PLAYBOOKS / "teardown.yaml", inv, tmp_path, limit="gpu-a")
        kill_leftovers([paths_of(a_vars)["logs"]])


class Prometheus:
    """A real Prometheus on a free loopback port whose one rule fires for `host` at once; stopped by its handle."""

    def __init__(self, folder: Path, host: str):
        folder.mkdir()
        (folder / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "t", "rules": [
            {"alert": "DflashTestFiring", "expr": "vector(1)", "labels": {"host": host}}]}]}))
        (folder / "prometheus.yml").write_text(yaml.safe_dump(
            {"global": {"evaluation_interval": "1s"}, "rule_files": [str(folder / "rules.yml")]}))
        self.url = f"http://127.0.0.1:{free_port()}"
        argv = [PROMETHEUS, f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address={self.url[7:]}"]
        self.log = open(folder / "prometheus.log", "wb")
        self.popen = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)

    def wait_firing(self, deadline_s: float = 60) -> None:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            assert self.popen.poll() is None, "prometheus exited; see its log"
            try:
                with urllib.request.urlopen(self.url + "/api/v1/alerts", timeout=2) as resp:  # noqa: S310
                    if any(a["state"] == "firing" for a in json.load(resp)["data"]["alerts"]):
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"no alert firing at {self.url} within {deadline_s:.0f} s")

    def stop(self) -> None:
        stop_started(self.popen)
        self.log.close()


def lines_by_host(out: str) -> dict[str, str]:
    return {ln.split(":", 1)[0]: ln for ln in out.splitlines() if ln.startswith("gpu-")}


@pytest.mark.slow
def test_one_line_per_host_with_the_alerts_prometheus_says_are_firing(fleet, tmp_path):
    if not os.access(PROMETHEUS, os.X_OK) and not os.environ.get("CI"):
        pytest.skip("no /usr/bin/prometheus here (Debian's prometheus package; .ci/run installs it)")
    inventory, a_vars = fleet
    prom = Prometheus(tmp_path / "prom", "gpu-a")
    try:
        prom.wait_firing()
        code, out = invoke("status", "--group", "gpu", "-i", str(inventory(prometheus_url=prom.url)))
        assert code == 4, out  # gpu-b was never provisioned: unknown, the worst host deciding
        lines = lines_by_host(out)
        assert set(lines) == {"gpu-a", "gpu-b"} and len(out.strip().splitlines()) == 2, out
        a = lines["gpu-a"]
        assert a.startswith("gpu-a: RUNNING  ready  serves tiny (target ?, drafter ?)"), a
        assert "acceptance " in a and "(server)" in a, a  # the stand-in's counters since it started
        assert "loads: c=1 pays, c=16 slower" in a and "k=3  GPU 0 MiB  alerts: DflashTestFiring" in a, a
        b = lines["gpu-b"]
        assert b.startswith("gpu-b: NOT PROVISIONED") and "acceptance 50.0% (last measurement)" in b, b
        assert "k=5  GPU n/a  alerts: none" in b, b
        code, out = invoke("status", "-l", "gpu-*", "--json", "-i", str(inventory(prometheus_url=prom.url)))
        rows = json.loads(out[out.index("["): out.rindex("]") + 1])
        assert [r["host"] for r in rows] == ["gpu-a", "gpu-b"] and code == 4, out
        assert rows[0]["state"] == "running" and rows[0]["ready"] is True and rows[0]["k"] == 3
        assert rows[0]["alerts"] == ["DflashTestFiring"] and rows[1]["alerts"] == [] and rows[1]["state"] == "not provisioned"
        assert rows[1]["verdicts"] == {"1": "pays", "16": "slower"} and rows[1]["acceptance_from"] == "last measurement"
    finally:
        prom.stop()
    # Prometheus gone: the column says it did not answer, and the rest of the line stands
    code, out = invoke("status", "--group", "gpu", "-i", str(inventory(prometheus_url=prom.url)))
    a = lines_by_host(out)["gpu-a"]
    assert code == 4 and f"alerts: Prometheus at {prom.url} did not answer" in a and "k=3" in a, out


@pytest.mark.slow
def test_without_a_prometheus_url_the_alerts_column_says_so(fleet):
    inventory, _ = fleet
    code, out = invoke("status", "--group", "gpu", "-i", str(inventory()))
    lines = lines_by_host(out)
    assert all("alerts: no prometheus_url set in the inventory" in ln for ln in lines.values()), out
    assert "Traceback" not in out and code == 4
    # a URL that hides a password prints without it
    code, out = invoke("status", "--group", "gpu", "-i", str(inventory()), "-e",
                       "prometheus_url=http://watcher:s3cret@127.0.0.1:1")
    assert "s3cret" not in out and "alerts: Prometheus at http://127.0.0.1:1 did not answer" in out, out
