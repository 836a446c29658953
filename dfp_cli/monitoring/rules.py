"""Recording and alert rules for the fleet, from each host's floors (inventory) and measured loads (speed record).

Three groups. `dflash-thresholds`: one constant series per host and floor (`vector(x)` labelled with the host), so
each alert is one rule comparing a rate with its host's own floor `on(host)`; a host that leaves a floor unset has
no series and is not checked. `dflash-rates`: the rates the alerts read, summed per host over the fleet's window.
`dflash-alerts`: each alert with a summary and a `runbook` naming the invoke command that fixes it.
"""

from __future__ import annotations

import math
from typing import Callable

from dflash_host.vllm.metrics import ACCEPTED, DRAFT_TOKENS, DRAFTS
from dfp_cli.monitoring.hosts import HostView
from dfp_cli.monitoring.loads import LosingBand

# dcgm-exporter's framebuffer memory in use (MiB) per GPU, where a host sets gpu_exporter_port; elsewhere the host
# agent's textfile (dflash_host/monitor/textfile.py): its nvidia-smi reading and whether the tool's server runs
GPU_MEMORY_METRIC = "DCGM_FI_DEV_FB_USED"
AGENT_GPU_MEMORY = "dflash_gpu_memory_used_mib"
AGENT_SERVER_RUNNING = "dflash_server_running"
# MiB per host: DCGM's where it answers for the host, else the agent's (PromQL `or` keeps the left side per host)
GPU_MEMORY_PER_HOST = f"(sum by (host) ({GPU_MEMORY_METRIC}) or sum by (host) ({AGENT_GPU_MEMORY}))"
MEASURED_AT = "dflash_measurement_timestamp_seconds"  # the tool's textfile (dflash_host/speed/prom_textfile.py)
LOSING_LOW, LOSING_HIGH = "dflash:drafter_losing_load_low", "dflash:drafter_losing_load_high"
# the floors and ceilings per host: recorded name -> how a HostView gives it (None: not checked there)
FLOORS: dict[str, Callable[[HostView], float | None]] = {
    "dflash:min_acceptance_rate": lambda v: v.floor("min_acceptance_rate"),
    "dflash:min_mean_acceptance_length": HostView.min_mean_acceptance_length,
    "dflash:ttft_p99_max_seconds": lambda v: v.floor("ttft_p99_max_s"),
    "dflash:tpot_p99_max_seconds": lambda v: v.floor("tpot_p99_max_s"),
    "dflash:gpu_free_max_mib": HostView.gpu_free_mib,
    "dflash:prefix_cache_min_query_tokens_per_second":
        lambda v: v.floor("prefix_cache_min_query_tokens_per_s") if v.settings.get("prompts_share_prefixes") else None,
}


def constant(value: float) -> str:
    """A number as PromQL writes it (+Inf for no upper end)."""
    return "vector(+Inf)" if math.isinf(value) else f"vector({value!r})"


def _band_rules(view: HostView, band: LosingBand) -> list[dict]:
    labels = {"host": view.name, "concurrency": str(band.concurrency), "verdict": band.verdict}
    return [{"record": LOSING_LOW, "expr": constant(band.low), "labels": labels},
            {"record": LOSING_HIGH, "expr": constant(band.high), "labels": labels}]


def threshold_rules(views: list[HostView]) -> list[dict]:
    """One constant series per host and floor it sets, and two per load band where its drafter did not pay."""
    out = []
    for view in views:
        for name, value_of in FLOORS.items():
            value = value_of(view)
            if value is not None:
                out.append({"record": name, "expr": constant(float(value)), "labels": {"host": view.name}})
        for band in view.bands:
            out.extend(_band_rules(view, band))
    return out


def names(window: str) -> dict[str, str]:
    """The recorded rates' names (level:metric:operations, the window in the name)."""
    return {key: f"host:{metric}:{op}{window}" for key, metric, op in (
        ("drafts", "vllm_spec_decode_drafts", "rate"), ("drafted", "vllm_spec_decode_draft_tokens", "rate"),
        ("accepted", "vllm_spec_decode_accepted_tokens", "rate"),
        ("acceptance", "vllm_acceptance_rate", "ratio_rate"), ("length", "vllm_mean_acceptance_length", "rate"),
        ("running", "vllm_num_requests_running", "avg"), ("queries", "vllm_prefix_cache_queries", "rate"),
        ("hits", "vllm_prefix_cache_hits", "rate"), ("ttft", "vllm_time_to_first_token_seconds", "p99_"),
        ("tpot", "vllm_request_time_per_output_token_seconds", "p99_"))}


def rate_rules(window: str) -> list[dict]:
    """Per-host rates over the window: drafts, acceptance, load, prefix cache, latency percentiles."""
    n = names(window)

    def rate(metric: str) -> str:
        return f"sum by (host) (rate({metric}[{window}]))"

    def p99(histogram: str) -> str:
        return f"histogram_quantile(0.99, sum by (host, le) (rate({histogram}_bucket[{window}])))"

    exprs = {
        "drafts": rate(DRAFTS),
        "drafted": rate(DRAFT_TOKENS),
        "accepted": rate(ACCEPTED),
        "acceptance": f"{n['accepted']} / {n['drafted']}",
        "length": f"1 + {n['accepted']} / {n['drafts']}",
        "running": f"avg by (host) (avg_over_time(vllm:num_requests_running[{window}]))",
        "queries": rate("vllm:prefix_cache_queries_total"),
        "hits": rate("vllm:prefix_cache_hits_total"),
        "ttft": p99("vllm:time_to_first_token_seconds"),
        "tpot": p99("vllm:request_time_per_output_token_seconds"),
    }
    return [{"record": n[key], "expr": expr} for key, expr in exprs.items()]


HOST = "{{ $labels.host }}"
VALUE = '{{ $value | printf "%.2f" }}'  # humanize says 0.1 as "100m"
RESTART = f"invoke restart-server --host {HOST}"
COMPARE = f"invoke serving-bench --host {HOST} --compare-baseline"
WITHOUT_DRAFTER = f"serve without the drafter: drafter_model: null in {HOST}'s host_vars, then invoke provision --host {HOST}"


def _alert(name: str, expr: str, severity: str, summary: str, runbook: str) -> dict:
    return {"alert": name, "expr": expr, "labels": {"severity": severity},
            "annotations": {"summary": summary, "runbook": runbook}}


def alert_rules(window: str, hold: str) -> list[dict]:
    """Every alert, each holding `hold` (the fleet's monitoring_for) before it fires."""
    n = names(window)
    alerts = [
        _alert("DflashServerDown", 'up{job="vllm"} == 0', "critical",
               f"{HOST}: vLLM's /metrics does not answer", f"{RESTART} (stops what is left, frees the GPU, starts and verifies it)"),
        _alert("DflashServerNotReady", 'up{job="vllm-health"} == 0 and on(host) up{job="vllm"} == 1', "critical",
               f"{HOST}: vLLM answers /metrics but its /health fails (engine dead or not ready)", RESTART),
        _alert("DflashAcceptanceRateLow", f"{n['acceptance']} < on(host) dflash:min_acceptance_rate", "warning",
               f"{HOST}: acceptance rate {VALUE} over {window}, below its floor (min_acceptance_rate)",
               f"{RESTART} (verifies the acceptance at start); if it stays low, {COMPARE}, then invoke tune --host {HOST}"),
        _alert("DflashMeanAcceptanceLengthLow", f"{n['length']} < on(host) dflash:min_mean_acceptance_length",
               "warning", f"{HOST}: mean acceptance length {VALUE} over {window}, below its floor "
               "(1.00: the drafter never agrees)",
               f"{RESTART} (verifies the acceptance at start); if it stays low, {COMPARE}, then invoke tune --host {HOST}"),
        _alert("DflashDrafterLosesAtLoad",
               f"({n['running']} >= on(host) group_right {LOSING_LOW}) < on(host, concurrency, verdict) {LOSING_HIGH} "
               f"and on(host) {n['drafts']} > 0", "warning",
               f"{HOST}: the drafter runs at {VALUE} requests, where its own measurement judged it '{{{{ $labels.verdict }}}}' "
               "(concurrency {{ $labels.concurrency }})",
               f"invoke tune --host {HOST} --concurrency {{{{ $labels.concurrency }}}} (a k that pays at this load, or "
               f"none); or {WITHOUT_DRAFTER}"),
        _alert("DflashPrefixCacheNoHits",
               f"{n['hits']} == 0 and on(host) ({n['queries']} >= on(host) "
               "dflash:prefix_cache_min_query_tokens_per_second)", "warning",
               f"{HOST}: prefix cache hit rate 0 over {window} while its prompts share prefixes",
               f"{COMPARE} (the same prompts with and without the drafter); if the hits return without it, "
               f"{WITHOUT_DRAFTER}"),
        _alert("DflashGpuMemoryHeldWithoutServer",
               f"{GPU_MEMORY_PER_HOST} > on(host) dflash:gpu_free_max_mib "
               f'unless on(host) up{{job="vllm"}} == 1 unless on(host) {AGENT_SERVER_RUNNING} == 1', "critical",
               f"{HOST}: {{{{ $value | printf \"%.0f\" }}}} MiB of GPU memory held while no server of ours runs (an orphaned engine?)",
               f"invoke teardown --host {HOST} (stops the server's leftover processes and proves the GPU free), "
               f"then invoke provision --host {HOST}"),
        _alert("DflashSpeedMeasurementStale",
               f'max by (host) ({MEASURED_AT}) < on(host) max by (host) (process_start_time_seconds{{job="vllm"}})',
               "info",
               f"{HOST}: its last speed measurement is older than the running server's start",
               f"{COMPARE} (records the figures again for this launch)"),
        _alert("DflashTtftP99High", f"{n['ttft']} > on(host) dflash:ttft_p99_max_seconds", "warning",
               f"{HOST}: time to first token p99 {VALUE}s over {window}, above ttft_p99_max_s",
               f"{COMPARE} (the drafter or the load?), then invoke tune --host {HOST}"),
        _alert("DflashTpotP99High", f"{n['tpot']} > on(host) dflash:tpot_p99_max_seconds", "warning",
               f"{HOST}: time per output token p99 {VALUE}s over {window}, above tpot_p99_max_s",
               f"{COMPARE} (the drafter or the load?), then invoke tune --host {HOST}"),
    ]
    return [{**a, "for": hold} for a in alerts]


def rules_file(views: list[HostView], window: str, hold: str) -> dict:
    """The rule file: thresholds, rates, alerts."""
    return {"groups": [{"name": "dflash-thresholds", "rules": threshold_rules(views)},
                       {"name": "dflash-rates", "rules": rate_rules(window)},
                       {"name": "dflash-alerts", "rules": alert_rules(window, hold)}]}
