"""The Grafana dashboard `invoke monitoring` writes (grafana/dflash.json): it is what grafana-foundation-sdk's builders
produced and reads back through the SDK's Dashboard model unchanged; every panel's PromQL loads in Prometheus'
own parser (each query wrapped as a recording rule, `promtool check rules`); every metric a query names is one vLLM
exposes (../shared/reference/observability.md), one of our recording rules, or one the tool's textfile writes."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from dflash_host.monitor import textfile as host_textfile
from dflash_host.speed import prom_textfile
from dfp_cli.monitoring import rules as R
from dfp_cli.monitoring.command import documents, host_lines, write_documents
from dfp_cli.monitoring.dashboard import DASHBOARD_FILE, dashboard_json
from tests.monitoring.helpers import fleet, needs_promtool, promtool

sdk = pytest.importorskip("grafana_foundation_sdk", reason="grafana-foundation-sdk is in requirements.txt")
WINDOW = "5m"  # the fleet's monitoring_window (helpers.SETTINGS)
VLLM = {  # ../shared/reference/observability.md: "What vLLM exposes"
    "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"}
VLLM_HISTOGRAMS = {"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                   "vllm:request_time_per_output_token_seconds", "vllm:e2e_request_latency_seconds"}
PROMETHEUS = {"up", "ALERTS"}  # Prometheus' own: scrape health, and the alerts of the rule file
DCGM = R.GPU_MEMORY_METRIC  # NVIDIA dcgm-exporter's framebuffer memory in use (the `gpu` job, where gpu_exporter_port is set)
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
            "inf", "nan"}


def queries(board: dict) -> list[str]:
    """Every PromQL expression of the dashboard: the panels' targets and the query variables'."""
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    return exprs + [re.sub(r"^label_values\((.*), \w+\)$", r"\1", v["query"])
                    for v in board["templating"]["list"] if v["type"] == "query"]


def concrete(expr: str) -> str:
    """What Grafana sends Prometheus: the template variables filled in."""
    return expr.replace("$host", "bad").replace("${datasource}", "prometheus")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: its words less strings, label matchers and lists, ranges, functions
    and keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    words = re.findall(r"(?<![\w:.])([A-Za-z_:][\w:]*)(\s*\()?", text)
    return {w for w, call in words if not call and w not in KEYWORDS}


def known_metrics() -> set[str]:
    """vLLM's names (histograms with their series), Prometheus' own, our recorded names, the textfile's."""
    recorded = {r["record"] for g in R.rules_file(fleet(), WINDOW, "2m")["groups"] for r in g["rules"] if "record" in r}
    histograms = {h + suffix for h in VLLM_HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}
    return VLLM | histograms | PROMETHEUS | recorded | set(prom_textfile.HELP) | set(host_textfile.HELP) | {DCGM}


def test_the_written_json_is_the_sdks_builder_output_and_round_trips_through_its_model(tmp_path):
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    write_documents(str(tmp_path), documents(fleet()))
    board = json.loads((tmp_path / DASHBOARD_FILE).read_text())
    assert board == dashboard_json(WINDOW)
    again = json.loads(json.dumps(Dashboard.from_json(board), cls=JSONEncoder))
    assert again == board
    titles = [p["title"] for p in board["panels"]]
    assert titles == ["Fleet", "Fleet", "Alerts firing", "Host $host", "Throughput", "TTFT p50 / p99",
                      "TPOT p50 / p99", "Acceptance per position", "Acceptance", "k against the load",
                      "GPU memory", "Measured speed-up"]
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"  # imports as is: no __inputs to answer
    assert variables["host"]["query"] == 'label_values(up{job="vllm"}, host)'
    host_panels = [p for p in board["panels"] if p["type"] == "timeseries"]
    assert all('host="$host"' in t["expr"] for p in host_panels for t in p["targets"])
    assert all(t["datasource"]["uid"] == "${datasource}" for p in board["panels"] for t in p.get("targets", []))


def test_the_panels_read_the_recorded_series_the_alerts_compare():
    exprs = " ".join(queries(dashboard_json(WINDOW)))
    for key in ("acceptance", "length", "drafts", "ttft", "tpot"):
        assert R.names(WINDOW)[key] in exprs
    for name in ("dflash:min_acceptance_rate", "dflash:min_mean_acceptance_length", "dflash:ttft_p99_max_seconds",
                 "dflash:tpot_p99_max_seconds", R.LOSING_LOW, "dflash_num_speculative_tokens", "dflash_speedup",
                 "dflash_running_num_speculative_tokens", "dflash_running_schedule_num_speculative_tokens",
                 R.AGENT_GPU_MEMORY, R.AGENT_SERVER_RUNNING, R.GPU_MEMORY_PER_HOST,
                 "dflash_speedup_low", "dflash_speedup_high", 'ALERTS{alertstate="firing"}'):
        assert name in exprs, name


def test_every_metric_a_query_names_is_vllms_a_recording_rules_or_the_textfiles():
    assert metric_names('sum by (host, le) (rate(a:b_bucket{host="$host", x=~"y(z)"}[5m])) / on(host) group_left c') \
        == {"a:b_bucket", "c"}
    named = set().union(*(metric_names(e) for e in queries(dashboard_json(WINDOW))))
    assert named, "no metric found: the name extraction is broken"
    assert named - known_metrics() == set()


@needs_promtool
def test_every_panel_query_parses_in_promtool(tmp_path):
    exprs = [concrete(e) for e in queries(dashboard_json(WINDOW))]
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False, width=1 << 16))
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{len(exprs)} rules found" in checked.stdout


def test_without_the_sdk_the_prometheus_files_are_still_written_and_the_gap_is_said(monkeypatch):
    import importlib.util
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "grafana_foundation_sdk" else find_spec(name, *a))
    assert DASHBOARD_FILE not in documents(fleet()) and "prometheus.yml" in documents(fleet())
    assert any("grafana-foundation-sdk is not installed" in line for line in host_lines(fleet()))
