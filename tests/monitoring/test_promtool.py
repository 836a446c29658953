"""`invoke monitoring`'s files proven by Prometheus' own promtool: the configuration and the rules load
(`check config`, `check rules`), and `test rules` feeds each alert input series on which it must fire for one host
and must not for the others (healthy figures, no drafts, a floor the host does not set, a load where the drafter
pays), checking the alert's labels and its rendered summary and runbook."""

from __future__ import annotations

import math
import re

import yaml

from dflash_host.speed import prom_textfile
from dfp_cli.monitoring import rules as R
from dfp_cli.monitoring.command import CONFIG_FILE, documents, write_documents
from dfp_cli.monitoring.targets import RULES_FILE
from tests.monitoring.helpers import COMMIT_D, COMMIT_T, fleet, needs_promtool, promtool

WINDOW, HOLD = "5m", "2m"  # the fleet's settings (helpers.SETTINGS)
EVAL = "10m"


def counter(per_minute: float) -> str:
    return f"0+{per_minute:g}x15"


def gauge(value: float) -> str:
    return f"{value:g}x15"


def series(name: str, host: str, values: str, **labels: str) -> dict:
    text = ", ".join(f'{k}="{v}"' for k, v in {"host": host, **labels}.items())
    return {"series": f"{name}{{{text}}}", "values": values}


def spec(host: str, drafted: float, accepted: float, drafts: float) -> list[dict]:
    """Speculative-decoding counters per minute."""
    return [series("vllm:spec_decode_num_draft_tokens_total", host, counter(drafted)),
            series("vllm:spec_decode_num_accepted_tokens_total", host, counter(accepted)),
            series("vllm:spec_decode_num_drafts_total", host, counter(drafts))]


def histogram(name: str, host: str, share_at_or_below: dict[str, float]) -> list[dict]:
    """60 observations a minute, split over the bucket bounds as given (cumulative shares)."""
    return [series(f"{name}_bucket", host, counter(60 * share), le=le) for le, share in share_at_or_below.items()]


VLLM = {"job": "vllm", "instance": "i"}
CASES = {  # alert: (input series, [(labels of each firing alert, its value)]); every other host must stay silent
    "DflashServerDown": (
        [series("up", "bad", gauge(0), **VLLM), series("up", "good", gauge(1), **VLLM)],
        [({"host": "bad", **VLLM}, 0)]),
    "DflashServerNotReady": (
        [series("up", "bad", gauge(1), **VLLM), series("up", "bad", gauge(0), job="vllm-health", instance="i"),
         series("up", "good", gauge(1), **VLLM), series("up", "good", gauge(1), job="vllm-health", instance="i"),
         series("up", "quiet", gauge(0), **VLLM), series("up", "quiet", gauge(0), job="vllm-health", instance="i")],
        [({"host": "bad", "job": "vllm-health", "instance": "i"}, 0)]),
    "DflashAcceptanceRateLow": (
        spec("bad", 60, 6, 20) + spec("good", 60, 30, 20) + spec("quiet", 0, 0, 0),  # quiet: no drafts, no rate
        [({"host": "bad"}, 0.1)]),
    "DflashMeanAcceptanceLengthLow": (  # floor 1 + 0.3 x k=3 = 1.9: a drafter stuck at 1.00 fires
        spec("bad", 60, 0, 20) + spec("good", 60, 30, 20),
        [({"host": "bad"}, 1.0)]),
    "DflashDrafterLosesAtLoad": (  # bad: slower at 16 (band from 4 up); good pays there; quiet has no drafts
        [series("vllm:num_requests_running", "bad", gauge(20)), series("vllm:num_requests_running", "good", gauge(20)),
         series("vllm:num_requests_running", "quiet", gauge(20))] + spec("bad", 60, 30, 20) + spec("good", 60, 30, 20),
        [({"host": "bad", "concurrency": "16", "verdict": "slower"}, 20)]),
    "DflashPrefixCacheNoHits": (  # good hits; idle looks up too little; quiet's prompts share no prefixes
        [series("vllm:prefix_cache_queries_total", h, counter(q)) for h, q in
         (("bad", 12000), ("good", 12000), ("quiet", 12000))] +
        [series("vllm:prefix_cache_hits_total", h, counter(x)) for h, x in (("bad", 0), ("good", 3000), ("quiet", 0))],
        [({"host": "bad"}, 0)]),
    "DflashGpuMemoryHeldWithoutServer": (  # good: its server runs; quiet: under gpu-cleanup's 1024 MiB
        [series(R.GPU_MEMORY_METRIC, "bad", gauge(40000), gpu="0"), series("up", "bad", gauge(0), **VLLM),
         series(R.GPU_MEMORY_METRIC, "good", gauge(40000), gpu="0"), series("up", "good", gauge(1), **VLLM),
         series(R.GPU_MEMORY_METRIC, "quiet", gauge(300), gpu="0"), series("up", "quiet", gauge(0), **VLLM)],
        [({"host": "bad"}, 40000)]),
    "DflashSpeedMeasurementStale": (
        [series("dflash_measurement_timestamp_seconds", "bad", gauge(1000), job="node"),
         series("process_start_time_seconds", "bad", gauge(2000), **VLLM),
         series("dflash_measurement_timestamp_seconds", "good", gauge(3000), job="node"),
         series("process_start_time_seconds", "good", gauge(2000), **VLLM)],
        [({"host": "bad"}, 1000)]),
    "DflashTtftP99High": (  # bad: every first token between 1 and 10 s (p99 9.91 s); good: all under 1 s
        histogram("vllm:time_to_first_token_seconds", "bad", {"1": 0, "10": 1, "+Inf": 1}) +
        histogram("vllm:time_to_first_token_seconds", "good", {"1": 1, "10": 1, "+Inf": 1}),
        [({"host": "bad"}, 9.91)]),
    "DflashTpotP99High": (
        histogram("vllm:request_time_per_output_token_seconds", "bad", {"0.1": 0, "1": 1, "+Inf": 1}) +
        histogram("vllm:request_time_per_output_token_seconds", "good", {"0.1": 1, "1": 1, "+Inf": 1}),
        [({"host": "bad"}, 0.991)]),
}


NODE = {"job": "node", "instance": "n"}
AGENT = R.AGENT_GPU_MEMORY
MORE_CASES = [  # the leak alert again, on the host agent's series (dflash_host/monitor) where no DCGM answers
    ("DflashGpuMemoryHeldWithoutServer", (  # good: its server runs (still loading: vLLM not answering yet);
        # quiet: DCGM answers for it (300 MiB) and wins over the agent's reading
        [series(AGENT, "bad", gauge(20000), gpu="0", **NODE), series(AGENT, "bad", gauge(20000), gpu="1", **NODE),
         series(R.AGENT_SERVER_RUNNING, "bad", gauge(0), **NODE), series("up", "bad", gauge(0), **VLLM),
         series(AGENT, "good", gauge(40000), gpu="0", **NODE), series(R.AGENT_SERVER_RUNNING, "good", gauge(1), **NODE),
         series("up", "good", gauge(0), **VLLM),
         series(AGENT, "quiet", gauge(40000), gpu="0", **NODE), series(R.GPU_MEMORY_METRIC, "quiet", gauge(300), gpu="0"),
         series(R.AGENT_SERVER_RUNNING, "quiet", gauge(0), **NODE), series("up", "quiet", gauge(0), **VLLM)],
        [({"host": "bad"}, 40000)])),
]


def rendered(template: str, labels: dict, value: float) -> str:
    """The annotation as Prometheus renders it, for the template forms the rules use."""
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)
    return re.sub(r'\{\{ \$value \| printf "(%\.\d+f)" \}\}', lambda m: m.group(1) % value, text)


def alert_test(rule: dict, case: tuple) -> dict:
    inputs, firing = case
    exp = [{"exp_labels": {**labels, "alertname": rule["alert"], **rule["labels"]},
            "exp_annotations": {k: rendered(v, labels, value) for k, v in rule["annotations"].items()}}
           for labels, value in firing]
    silent_before_hold = {"eval_time": "1m", "alertname": rule["alert"], "exp_alerts": []}
    return {"interval": "1m", "input_series": inputs,
            "alert_rule_test": [silent_before_hold, {"eval_time": EVAL, "alertname": rule["alert"], "exp_alerts": exp}]}


def written(tmp_path):
    write_documents(str(tmp_path), documents(fleet()))
    return tmp_path / CONFIG_FILE, tmp_path / RULES_FILE


@needs_promtool
def test_the_written_configuration_and_rules_pass_promtool_check(tmp_path):
    config, rules_path = written(tmp_path)
    checked = promtool("check", "config", str(config))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout and "1 rule files found" in checked.stdout
    checked = promtool("check", "rules", str(rules_path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    targets = yaml.safe_load((tmp_path / "targets" / "vllm.yml").read_text())
    assert targets[0] == {"targets": ["10.0.0.1:8000"], "labels": {
        "host": "bad", "group": "gpu", "served_model": "qwen", "target_commit": COMMIT_T, "drafter_commit": COMMIT_D}}
    assert [g["targets"] for g in yaml.safe_load((tmp_path / "targets" / "node.yml").read_text())] == [
        ["10.0.0.1:9100"], ["10.0.0.2:9100"], ["10.0.0.3:9100"]]


@needs_promtool
def test_every_alert_fires_for_its_fault_and_stays_silent_elsewhere(tmp_path):
    _, rules_path = written(tmp_path)
    alerts = {r["alert"]: r for g in yaml.safe_load(rules_path.read_text())["groups"] for r in g["rules"] if "alert" in r}
    assert set(alerts) == set(CASES), "each alert needs a firing and a silent case"
    for rule in alerts.values():
        assert rule["annotations"]["runbook"].startswith("invoke "), rule
        assert rule["for"] == HOLD
    tests = {"rule_files": [str(rules_path)], "evaluation_interval": "1m",
             "tests": [alert_test(alerts[name], case) for name, case in [*CASES.items(), *MORE_CASES]]}
    test_file = tmp_path / "dflash.rules.test.yml"
    test_file.write_text(yaml.safe_dump(tests, sort_keys=False), encoding="utf-8")
    tested = promtool("test", "rules", str(test_file))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_thresholds_are_the_inventorys_and_the_records_not_constants():
    rules = R.threshold_rules(fleet())
    by = {(r["record"], r["labels"]["host"], r["labels"].get("concurrency")): r["expr"] for r in rules}
    assert by[("dflash:min_acceptance_rate", "bad", None)] == "vector(0.3)"
    assert by[("dflash:min_mean_acceptance_length", "bad", None)] == "vector(1.9)"  # 1 + 0.3 x k=3
    assert by[("dflash:gpu_free_max_mib", "good", None)] == "vector(1024.0)"  # gpu-cleanup's own default
    assert by[(R.LOSING_LOW, "bad", "16")] == "vector(4.0)" and by[(R.LOSING_HIGH, "bad", "16")] == "vector(+Inf)"
    assert not any(k[1] == "good" and k[0] == R.LOSING_LOW for k in by)  # it pays at every measured load
    assert ("dflash:prefix_cache_min_query_tokens_per_second", "quiet", None) not in by
    assert R.MEASURED_AT in prom_textfile.HELP  # the stale alert reads the tool's textfile
    assert not math.isnan(float(by[("dflash:ttft_p99_max_seconds", "bad", None)][7:-1]))


def test_the_load_bands_follow_the_verdicts_a_schedule_and_a_tune_where_no_k_pays():
    from dfp_cli.monitoring.loads import losing_bands, verdicts_of

    one_k = {"comparison": {"1": {"verdict": "pays"}, "4": {"verdict": "inconclusive"}, "16": {"verdict": "slower"}}}
    assert [(b.concurrency, b.verdict, b.low, b.high) for b in losing_bands(verdicts_of(one_k))] == [
        (4, "inconclusive", 2.0, 8.0), (16, "slower", 8.0, math.inf)]
    scheduled = {**one_k, "choice": {"schedule": [[1, 8, 3], [9, 64, 1]], "per_level": {
        "1": {"chosen_k": 3}, "4": {"chosen_k": 3}, "16": {"chosen_k": 1}}}}  # each level served with a k that pays
    assert losing_bands(verdicts_of(scheduled)) == []
    none_pays = {**one_k, "choice": {"per_level": {"1": {"chosen_k": 3}, "16": {"chosen_k": None}}}}
    assert [(b.concurrency, b.verdict) for b in losing_bands(verdicts_of(none_pays))] == [
        (4, "inconclusive"), (16, "no_k_pays")]


def test_a_headless_cluster_node_gets_no_vllm_target():
    from dfp_cli.monitoring.targets import target_groups
    from tests.monitoring.helpers import launch, record, registered, view_of

    worker = view_of("w", registered("10.0.0.9", record({1: "pays"}), {**launch(), "cluster": {"headless": True}}), "gpu")
    assert target_groups([worker], "vllm") == [] and target_groups([worker], "node")[0]["targets"] == ["10.0.0.9:9100"]
