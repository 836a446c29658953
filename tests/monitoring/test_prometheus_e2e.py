"""A real Prometheus (Debian's /usr/bin/prometheus) watching the real `vllm serve` on CPU, as `invoke monitoring`
configured it, with a real node_exporter (/usr/bin/prometheus-node-exporter) reading the tool's textfile.

One module-scoped local host (DFP_E2E_ROOT/monitoring, the e2e tests' prebuilt environment venv-local): provision,
then serving-bench --compare-baseline (short; min_speedup 20 so that every level is judged "slower" and the
"k against the load" panel has its band: on CPU the tiny pair's speed-up is noise around 1), then the command writes
prometheus.yml, the rules and the dashboard into a temporary folder, with a 1 s scrape interval
(monitoring_scrape_interval), a 30 s window and a 5 s `for`. Prometheus, node_exporter and the host agent
(dflash_host.monitor, on the stand-in nvidia-smi: the one stand-in) are started; every dashboard panel's query, the
variables filled in, must return a series from /api/v1/query; then real faults: the server stopped by `teardown`
fires DflashServerDown, and an orphan process holding the stand-in GPU's memory then fires
DflashGpuMemoryHeldWithoutServer. Screenshots of Prometheus' own pages (the measured
speed-up's graph, the alerts) are taken in headless Chromium into the test's folder; DFP_WRITE_DOCS_SCREENSHOTS=1
also copies them to docs/img/ (docs/MONITORING.md shows them). Everything started here is stopped by its own handle.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest

from dfp_cli import speed_commands as SC
from dfp_cli.monitoring.command import monitoring
from dfp_cli.monitoring.dashboard import DASHBOARD_FILE
from tests.e2e.test_local_e2e import E2E_ROOT, host_vars, msgs
from tests.fakes.gpu_holder import FakeGpu
from tests.fakes.vllm_processes import free_port, kill_leftovers, stop_started
from tests.helpers import play

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS, NODE_EXPORTER = "/usr/bin/prometheus", "/usr/bin/prometheus-node-exporter"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DFP = E2E_ROOT / "monitoring"
EVERY, WINDOW, HOLD = "1s", "30s", "5s"
# Short on CPU: two levels, two repetitions each, in turns with the baseline (figures printed, never asserted).
LOAD = {"speed_concurrency": [1, 2], "speed_requests": 4, "speed_max_tokens": 16, "speed_repetitions": 2,
        "speed_min_seconds": 0, "speed_workload": "random", "min_speedup": 20.0}
ALERT_ONLY = 'ALERTS{alertstate="firing"}'  # a panel whose series exist only while an alert fires
# NVIDIA dcgm-exporter's series: it runs only beside a real NVIDIA GPU (the host agent's reading stands in here)
NO_EXPORTER_HERE = 'DCGM_FI_DEV_FB_USED{host="local"}'
SCHEDULE = [[1, 1, 3], [2, 64, 2]]  # a k per batch-size band, as tune writes it: the running schedule's series
ORPHAN_MIB = 4096  # held by a process that is not the server's, above gpu_free_threshold_mib (1024)
SHOTS = {"speedup": "prometheus-speedup.png", "alerts": "prometheus-alerts.png"}

missing = [p for p in (PROMETHEUS, NODE_EXPORTER) if not os.access(p, os.X_OK)] + ([] if CHROMIUM else ["chromium"])
if missing and not os.environ.get("CI"):
    pytestmark.append(pytest.mark.skip(reason=f"not installed here: {', '.join(missing)} (.ci/run installs them)"))


def wait_for(what: str, probe: Callable[[], Any], deadline_s: float, every_s: float = 1.0) -> Any:
    """probe() until it returns something true; past the deadline, fail naming what and the last answer."""
    end, last = time.monotonic() + deadline_s, None
    while time.monotonic() < end:
        last = probe()
        if last:
            return last
        time.sleep(every_s)
    raise AssertionError(f"{what}: not within {deadline_s:.0f} s (last: {last!r})")


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback, http
        return json.load(resp)


class Started:
    """A server process this test started (its own session, output to a log): stopped by this handle only."""

    def __init__(self, argv: list[str], log: Path, cwd: Path | None = None):
        self.argv, self.log = argv, log
        with open(log, "wb") as out:
            self.popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True, cwd=cwd)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> None:
        stop_started(self.popen)


class Prometheus:
    """The HTTP API of the Prometheus started here."""

    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr: str) -> list[dict]:
        got = get_json(f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert got["status"] == "success", got
        return got["data"]["result"]

    def targets(self) -> list[dict]:
        return get_json(f"{self.base}/api/v1/targets")["data"]["activeTargets"]

    def firing(self, name: str) -> list[dict]:
        alerts = get_json(f"{self.base}/api/v1/alerts")["data"]["alerts"]
        return [a for a in alerts if a["labels"].get("alertname") == name and a["state"] == "firing"]


def screenshot(url: str, png: Path, size: str = "1400,900") -> Path:
    """Prometheus' own page in headless Chromium (the flags of tools/speed_pages.py), given time to run its queries."""
    with tempfile.TemporaryDirectory(prefix="dfp-chromium-") as profile:
        done = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                               f"--user-data-dir={profile}", "--hide-scrollbars", f"--window-size={size}",
                               "--virtual-time-budget=8000", f"--screenshot={png}", url],
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and png.exists(), done.stderr[-2000:]
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000, f"{png}: {len(data)} bytes"
    if os.environ.get("DFP_WRITE_DOCS_SCREENSHOTS") == "1":
        (ROOT / "docs" / "img").mkdir(exist_ok=True)
        shutil.copyfile(png, ROOT / "docs" / "img" / png.name)
    return png


def panel_queries(board: dict, host: str) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel target and query variable, as Grafana sends them for `host`."""
    found = [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]
    found += [(f"variable {v['name']}", v["query"].removeprefix("label_values(").rsplit(",", 1)[0])
              for v in board["templating"]["list"] if v["type"] == "query"]
    return [(title, expr.replace("$host", host)) for title, expr in found]


def send_requests(port: int, n: int) -> None:
    """A few completions to the served model, so that rates and latency histograms move."""
    for i in range(n):
        body = json.dumps({"model": "tiny-target", "prompt": f"request {i}:", "max_tokens": 16}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:  # noqa: S310 - loopback, http
            assert resp.status == 200


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The local host provisioned and measured with the baseline; torn down (and checked) at the end."""
    folder = tmp_path_factory.mktemp("monitoring-e2e")
    DFP.mkdir(parents=True, exist_ok=True)
    hv = {**host_vars("monitoring"), "venv_root": str(E2E_ROOT / "venv-local"), "node_exporter_port": free_port(),
          "speculative_schedule": SCHEDULE,
          "monitoring_scrape_interval": EVERY, "monitoring_window": WINDOW, "monitoring_for": HOLD}
    inv = folder / "inventory.yaml"
    inv.write_text(json.dumps({"all": {"hosts": {"local": {"ansible_connection": "local", **hv}}}}))
    try:
        first = play("provision", inv)
        assert first.exit_code == 0, msgs(first)
        opts = {"host": "local", "inventory": [str(inv)], "compare_baseline": True,
                "extra_vars": [f"{k}={json.dumps(v)}" for k, v in LOAD.items()]}
        code, per_host, registered = SC.serving_bench_run(opts)
        assert code == 0 and "local" in per_host, registered
        print(SC.bench_table("local", per_host["local"]))
        assert (DFP / "metrics" / "dflash.prom").exists() and (DFP / "state" / "speed.json").exists()
        yield inv, hv, folder
    finally:
        down = play("teardown", inv)
        leaked = kill_leftovers([DFP / "logs"])
        assert not leaked, f"vLLM processes survived: {leaked}"
        assert down.exit_code == 0, msgs(down)


def start_watchers(hv: dict, out: Path, folder: Path, gpu: FakeGpu, prom_port: int) -> list[Started]:
    """node_exporter on the textfile folder, the host agent (on the stand-in nvidia-smi) writing into it, Prometheus."""
    metrics = DFP / "metrics"
    started = [Started([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{hv['node_exporter_port']}",
                        "--collector.disable-defaults", "--collector.textfile",
                        f"--collector.textfile.directory={metrics}"], folder / "node_exporter.log")]
    # the host agent as a host runs it: the system python, from the repository's copy (docs/MONITORING.md); every 3 s:
    # each nvidia-smi call is cut at the period, and the stand-in's python start can take over 1 s on 2 busy cores
    started.append(Started(["/usr/bin/python3", "-m", "dflash_host.monitor", "--dfp-root", str(DFP),
                            "--textfile-dir", str(metrics), "--nvidia-smi", gpu.nvidia_smi, "--every", "3"],
                           folder / "agent.log", cwd=ROOT))
    started.append(Started([PROMETHEUS, f"--config.file={out / 'prometheus.yml'}",
                            f"--storage.tsdb.path={folder / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                           folder / "prometheus.log"))
    return started


@pytest.fixture(scope="module")
def watched(served):
    """`invoke monitoring`'s files; node_exporter, the host agent and Prometheus on them, every target up."""
    inv, hv, folder = served
    out = folder / "prom"
    monitoring(None, host="local", group=None, limit=None, extra_vars=None, vault_password_file=None,
               inventory=[str(inv)], out=str(out))
    config = (out / "prometheus.yml").read_text()
    assert f"scrape_interval: {EVERY}" in config, config
    gpu, prom_port, started = FakeGpu(), free_port(), []
    try:
        started = start_watchers(hv, out, folder, gpu, prom_port)
        prom = Prometheus(prom_port)

        def all_up() -> list | None:
            if not all(s.alive() for s in started):
                raise AssertionError(f"exited: {[(s.argv, s.log.read_text()[-2000:]) for s in started if not s.alive()]}")
            try:
                targets = prom.targets()
            except OSError:
                return None
            up = sorted(t["labels"]["job"] for t in targets if t["health"] == "up")
            return up if up == ["node", "vllm", "vllm-health"] else None

        wait_for("Prometheus scraping vllm, vllm-health and node", all_up, 60)
        yield prom, out, folder, gpu
    finally:
        for s in reversed(started):
            s.stop()
        gpu.cleanup()  # SIGKILLs only the holders it started, by PID


def test_every_dashboard_panel_query_returns_a_series_from_the_real_prometheus(watched, served):
    prom, out, folder, _ = watched
    send_requests(served[1]["vllm_port"], 6)
    board = json.loads((out / DASHBOARD_FILE).read_text())
    queries = [(title, expr) for title, expr in panel_queries(board, "local") if expr not in (ALERT_ONLY, NO_EXPORTER_HERE)]
    assert len(queries) > 20, queries

    def empty() -> list:
        return [(title, expr) for title, expr in queries if not prom.query(expr)]

    left = queries
    end = time.monotonic() + 90  # the rates need two scrapes and the recording rules an evaluation
    while left and time.monotonic() < end:
        time.sleep(2)
        left = empty()
    assert not left, "panel queries with no series:\n" + "\n".join(f"{t}: {e}" for t, e in left)
    speedup = prom.query('dflash_speedup{host="local"}')
    assert sorted(s["metric"]["concurrency"] for s in speedup) == ["1", "2"], speedup
    assert prom.query('dflash:drafter_losing_load_low{host="local"}'), "no band: the record judged every level 'pays'"
    schedule = prom.query('dflash_running_schedule_num_speculative_tokens{host="local"}')
    assert sorted(float(s["value"][1]) for s in schedule) == [2.0, 3.0], schedule
    wait_for("30 s of the speed-up scraped (for the graph)", lambda: prom.query(
        'count_over_time(dflash_speedup{host="local", concurrency="1"}[1m]) >= 30'), 60)
    expr = urllib.parse.quote('{__name__=~"dflash_speedup(_low|_high)?", host="local"}')  # with its interval
    screenshot(f"{prom.base}/graph?g0.expr={expr}&g0.tab=0&g0.range_input=1m", folder / SHOTS["speedup"])


def test_stopping_the_server_fires_server_down_and_the_alert_panels_fill(watched, served):
    prom, out, folder, _ = watched
    assert not prom.firing("DflashServerDown")
    down = play("teardown", served[0])
    assert down.exit_code == 0, msgs(down)
    [alert] = wait_for("DflashServerDown firing", lambda: prom.firing("DflashServerDown"), 60)
    assert alert["labels"]["host"] == "local" and alert["labels"]["severity"] == "critical", alert
    assert alert["annotations"]["runbook"].startswith("invoke restart-server --host local"), alert
    board = json.loads((out / DASHBOARD_FILE).read_text())
    alert_only = [(title, expr) for title, expr in panel_queries(board, "local") if expr == ALERT_ONLY]
    assert alert_only and all(prom.query(expr) for _, expr in alert_only), alert_only
    assert not prom.firing("DflashGpuMemoryHeldWithoutServer")  # the stand-in GPU is free: nothing held


def test_an_orphan_holding_the_gpu_without_the_server_fires_the_leak_alert(watched):
    prom, _, folder, gpu = watched
    gpu.start({"name": "orphan", "mib": ORPHAN_MIB})  # its own session: no process of the server's
    [alert] = wait_for("DflashGpuMemoryHeldWithoutServer firing",
                       lambda: prom.firing("DflashGpuMemoryHeldWithoutServer"), 60)
    assert alert["labels"]["host"] == "local" and float(alert["value"]) == ORPHAN_MIB, alert
    assert f"{ORPHAN_MIB} MiB of GPU memory held" in alert["annotations"]["summary"], alert
    assert alert["annotations"]["runbook"].startswith("invoke teardown --host local"), alert
    assert prom.firing("DflashServerDown")
    screenshot(f"{prom.base}/classic/alerts", folder / SHOTS["alerts"], size="1400,1100")  # Debian's build's UI
