"""The fleet's Grafana dashboard, built with grafana-foundation-sdk (Grafana's own generated builders and types).

Two parts. The fleet overview: one table row per host (vLLM up, ready, served model, acceptance rate, mean acceptance
length, alerts firing) and the firing alerts themselves. Per host (the `host` variable, read from the targets'
`host` label): throughput, TTFT and TPOT p50/p99 against the inventory's p99 ceilings, acceptance per draft
position, acceptance rate and mean acceptance length against their floors, k against the running requests and the
loads where the drafter did not pay, the measured speed-up with its 95 % interval.

Where a recording rule exists its name is used (rules.names, rules.FLOORS, rules.LOSING_LOW), so a panel shows the
very series an alert compares. Every query goes through the `datasource` variable, so the JSON imports as is into
any Grafana with a Prometheus data source.
"""

from __future__ import annotations

from typing import Any

from dfp_cli.monitoring.rules import (
    AGENT_GPU_MEMORY,
    AGENT_SERVER_RUNNING,
    GPU_MEMORY_METRIC,
    GPU_MEMORY_PER_HOST,
    LOSING_LOW,
    names,
)

DASHBOARD_FILE = "grafana/dflash.json"
UID = "dflash-fleet"
DS = "${datasource}"
HOST_SEL = 'host="$host"'


def _ds() -> Any:
    from grafana_foundation_sdk.models.dashboard import DataSourceRef
    return DataSourceRef(type_val="prometheus", uid=DS)


def _query(expr: str, legend: str, ref: str, table: bool = False) -> Any:
    """One Prometheus query; a table query is instant (the value now, one row per series)."""
    from grafana_foundation_sdk.builders import prometheus
    from grafana_foundation_sdk.models.prometheus import PromQueryFormat
    q = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(_ds())
    return q.instant().format(PromQueryFormat.TABLE) if table else q.range()


def _series(title: str, unit: str, queries: list[tuple[str, str]], description: str, width: int = 12) -> Any:
    """A time-series panel: (expr, legend) pairs, refIds A, B, ... in order."""
    from grafana_foundation_sdk.builders import timeseries
    from grafana_foundation_sdk.builders.common import VizLegendOptions
    from grafana_foundation_sdk.models.common import LegendDisplayMode, LegendPlacement
    key = VizLegendOptions().show_legend(True).display_mode(LegendDisplayMode.LIST).placement(LegendPlacement.BOTTOM)
    panel = timeseries.Panel().title(title).description(description).unit(unit).datasource(_ds()) \
        .height(8).span(width).legend(key)
    for i, (expr, legend) in enumerate(queries):
        panel = panel.with_target(_query(expr, legend, chr(ord("A") + i)))
    return panel


def _right_axis(panel: Any, refs: tuple[str, ...], unit: str) -> Any:
    """Queries `refs` on their own right-hand axis (k beside a load, say)."""
    from grafana_foundation_sdk.models.dashboard import DynamicConfigValue
    for ref in refs:
        panel = panel.override_by_query(ref, [DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
                                              DynamicConfigValue(id_val="unit", value=unit)])
    return panel


def _gpu_memory() -> Any:
    """Per GPU: memory in use (the host agent's nvidia-smi reading; DCGM's where scraped) and total, the leak alert's
    threshold, and whether the tool's server runs (right axis): memory held with no server is what that alert says."""
    return _right_axis(_series("GPU memory", "mbytes", [
        (f"{AGENT_GPU_MEMORY}{{{HOST_SEL}}}", "GPU {{gpu}} used"),
        (f"{GPU_MEMORY_METRIC}{{{HOST_SEL}}}", "GPU {{gpu}} used (DCGM)"),
        (f"dflash_gpu_memory_total_mib{{{HOST_SEL}}}", "GPU {{gpu}} total"),
        (f"dflash:gpu_free_max_mib{{{HOST_SEL}}}", "held above (gpu_free_threshold_mib)"),
        (f"max by (host) ({AGENT_SERVER_RUNNING}{{{HOST_SEL}}})", "server of ours running")],
        "GPU memory per GPU (MiB) against the threshold above which gpu-cleanup counts it held, and whether the "
        "tool's vLLM server runs (1, right axis): memory held while it does not is DflashGpuMemoryHeldWithoutServer"),
        ("E",), "none")


def overview_queries(window: str) -> list[tuple[str, str]]:
    """The fleet table's columns (expr, column name), each one value per host."""
    n = names(window)
    return [
        ('max by (host, served_model) (up{job="vllm"})', "up"),
        ('max by (host) (up{job="vllm-health"})', "ready"),
        (n["acceptance"], "acceptance rate"),
        (n["length"], "mean acceptance length"),
        ('count by (host) (ALERTS{alertstate="firing"}) or on(host) (0 * max by (host) (up{job="vllm"}))',
         "alerts firing"),
        (GPU_MEMORY_PER_HOST, "GPU MiB"),
    ]


def _fleet_table(window: str) -> Any:
    """One row per host: the queries joined on `host`, their value columns named."""
    from grafana_foundation_sdk.builders import table
    from grafana_foundation_sdk.models.dashboard import DataTransformerConfig
    queries = overview_queries(window)
    panel = table.Panel().title("Fleet").datasource(_ds()).show_header(True).height(8).span(16).description(
        f"Per host: vLLM /metrics up, /health ready, served model, acceptance over {window}, alerts firing now, "
        "GPU memory in use (DCGM where scraped, else the host agent's nvidia-smi reading)")
    for i, (expr, _) in enumerate(queries):
        panel = panel.with_target(_query(expr, "", chr(ord("A") + i), table=True))
    renames = {f"Value #{chr(ord('A') + i)}": title for i, (_, title) in enumerate(queries)}
    return panel.with_transformation(DataTransformerConfig(id_val="joinByField",
                                                           options={"byField": "host", "mode": "outer"})) \
        .with_transformation(DataTransformerConfig(id_val="organize", options={
            "excludeByName": {"Time": True, "Time 1": True, "Time 2": True, "Time 3": True, "Time 4": True,
                              "Time 5": True, "Time 6": True}, "renameByName": renames}))


def _alerts_table() -> Any:
    """Every alert firing now, with its host and severity."""
    from grafana_foundation_sdk.builders import table
    return table.Panel().title("Alerts firing").datasource(_ds()).show_header(True).height(8).span(8) \
        .description("Prometheus' ALERTS series: the dflash-alerts rules (runbooks in the rule file)") \
        .with_target(_query('ALERTS{alertstate="firing"}', "", "A", table=True))


def _latency(n: dict[str, str], window: str, what: str, histogram: str, key: str, ceiling: str) -> Any:
    p50 = f'histogram_quantile(0.5, sum by (host, le) (rate({histogram}_bucket{{{HOST_SEL}}}[{window}])))'
    return _series(f"{what} p50 / p99", "s", [
        (p50, "p50"), (f"{n[key]}{{{HOST_SEL}}}", "p99"), (f"{ceiling}{{{HOST_SEL}}}", "p99 ceiling")],
        f"{what} over {window}; p99 is the recorded rate the alert compares with its ceiling")


def host_panels(window: str) -> list[Any]:
    """The per-host panels, in order, each filtered to $host."""
    n = names(window)
    return [
        _series("Throughput", "tokens/s", [
            (f"sum by (host) (rate(vllm:generation_tokens_total{{{HOST_SEL}}}[{window}]))", "generated tokens/s")],
            f"Output tokens per second over {window}"),
        _latency(n, window, "TTFT", "vllm:time_to_first_token_seconds", "ttft", "dflash:ttft_p99_max_seconds"),
        _latency(n, window, "TPOT", "vllm:request_time_per_output_token_seconds", "tpot",
                 "dflash:tpot_p99_max_seconds"),
        _series("Acceptance per position", "percentunit", [
            (f"sum by (host, position) (rate(vllm:spec_decode_num_accepted_tokens_per_pos_total{{{HOST_SEL}}}"
             f"[{window}])) / on(host) group_left {n['drafts']}{{{HOST_SEL}}}", "position {{position}}")],
            "Accepted tokens at each draft position / drafts: where the drafter stops agreeing"),
        _series("Acceptance", "none", [
            (f"{n['length']}{{{HOST_SEL}}}", "mean acceptance length"),
            (f"dflash:min_mean_acceptance_length{{{HOST_SEL}}}", "length floor"),
            (f"{n['acceptance']}{{{HOST_SEL}}}", "acceptance rate"),
            (f"dflash:min_acceptance_rate{{{HOST_SEL}}}", "rate floor"),
            (f"dflash_mean_acceptance_length{{{HOST_SEL}}}", "length at the last measurement")],
            "Mean acceptance length (1 + accepted / drafts) and acceptance rate (accepted / drafted) against the "
            "host's floors; 1.00 means the drafter never agrees"),
        _right_axis(_series("k against the load", "none", [
            (f"sum by (host) (vllm:num_requests_running{{{HOST_SEL}}})", "running requests"),
            (f"{LOSING_LOW}{{{HOST_SEL}}}", "drafter not paying from (c={{concurrency}}, {{verdict}})"),
            (f"max by (host) (dflash_num_speculative_tokens{{{HOST_SEL}}})", "k (last measurement)"),
            (f"max by (host) (dflash_running_num_speculative_tokens{{{HOST_SEL}}})", "k (running)"),
            (f"max by (host, batch_size_min, batch_size_max) (dflash_running_schedule_num_speculative_tokens"
             f"{{{HOST_SEL}}})", "k at batch {{batch_size_min}}-{{batch_size_max}} (running schedule)")],
            "Requests running now, the loads from which the host's own measurement found the drafter not paying, "
            "and k (right axis): the running server's (the host agent's textfile: its launch, and tune's schedule "
            "per batch size) and the one the last speed measurement recorded"), ("C", "D", "E"), "none"),
        _gpu_memory(),
        _series("Measured speed-up", "none", [
            (f"dflash_speedup{{{HOST_SEL}}}", "c={{concurrency}}"),
            (f"dflash_speedup_low{{{HOST_SEL}}}", "c={{concurrency}} 95 % low"),
            (f"dflash_speedup_high{{{HOST_SEL}}}", "c={{concurrency}} 95 % high")],
            "Output tokens/s with the drafter / without it per concurrency, and its 95 % interval, from the last "
            "speed measurement (the tool's textfile); below 1 the drafter is slower", width=24),
    ]


def _variables() -> list[Any]:
    from grafana_foundation_sdk.builders import dashboard
    from grafana_foundation_sdk.models.dashboard import VariableRefresh, VariableSort
    return [dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"),
            dashboard.QueryVariable("host").label("host").datasource(_ds())
            .query('label_values(up{job="vllm"}, host)').refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC)]


def build(window: str) -> Any:
    """The SDK's Dashboard model (rates over the fleet's monitoring_window, as the rules)."""
    from grafana_foundation_sdk.builders import dashboard
    board = dashboard.Dashboard("dflash fleet").uid(UID).tags(["dflash", "vllm"]).editable() \
        .time("now-6h", "now").refresh("30s").description(
            "Written by `invoke monitoring` (dflash-provision); a re-run rewrites it")
    for variable in _variables():
        board = board.with_variable(variable)
    parts = [dashboard.Row("Fleet"), _fleet_table(window), _alerts_table(), dashboard.Row("Host $host"),
             *host_panels(window)]
    for number, part in enumerate(parts, start=1):  # ids: Grafana keys panel state by them
        part = part.id(number)
        board = board.with_row(part) if isinstance(part, dashboard.Row) else board.with_panel(part)
    return board.build()


def sdk_missing() -> str | None:
    """Why the dashboard cannot be built here (grafana-foundation-sdk needs Python 3.11+), None when it can."""
    import importlib.util
    if importlib.util.find_spec("grafana_foundation_sdk") is None:
        return ("grafana-foundation-sdk is not installed (Python 3.11+: pip install -r requirements.txt -c "
                f"constraints.txt), so {DASHBOARD_FILE} was not written")
    return None


def dashboard_json(window: str) -> dict:
    """The importable JSON (a dict): the built model as the SDK serialises it."""
    import json

    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    return json.loads(json.dumps(build(window), cls=JSONEncoder))
