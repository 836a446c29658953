"""The prefix-cache hit rate with and without the drafter (serving_bench rows, speed_record's comparison).

serving_bench measures two real HTTP servers in turns (A B A B) with the built-in workload, whose support
requests share their first block of words: the stand-in (standin_server.py) with the drafter is staged with a
prefix cache that never hits (the fault vLLM issues 54360, 51250, 57032 report, which a real server on this
machine cannot show on demand), the baseline's hits. speed_record then compares them, as the serving-bench
playbook does, and serving-bench's table prints what it saw and what to do.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dflash_host.module import Context, execute
from dflash_host.speed.prefix_cache import compare_prefix, judge, prefix_delta, prefix_figures
from dflash_host.speed.workload import SUPPORT_NOTES, builtin_requests
from dfp_cli import speed_commands as SC
from dfp_cli.speed_html import host_page
from library import serving_bench, speed_record

sys.path.insert(0, str(Path(__file__).resolve().parent))
from standin_server import StandIn  # noqa: E402
from test_serving_bench_units import launch_record  # noqa: E402


def measure(tmp_path: Path, drafter_hits: bool) -> dict:
    """serving_bench in turns: the server with the drafter (url) and the baseline (its launch record)."""
    with StandIn(prefix_hits=drafter_hits) as with_, StandIn(agree=False) as without:
        (tmp_path / "base").mkdir()
        args = {"url": with_.url, "model": "tiny", "concurrency": [2], "requests": 10, "max_tokens": 4,
                "load_generator": "builtin", "workload": "builtin", "repetitions": 2, "warmup": False,
                "min_seconds": 0, "baseline_pidfile": launch_record(tmp_path / "base", without.url)}
        res = execute(serving_bench.ARGS, serving_bench.run, args, Context(), "serving_bench")
        assert not res["failed"], res["msg"]
        sent_with = [b["messages"][0]["content"] for b in with_.bodies]
        sent_without = [b["messages"][0]["content"] for b in without.bodies]
    assert sorted(sent_with) == sorted(sent_without)  # the same prompts, both ways (arrival order varies)
    assert sum(SUPPORT_NOTES in p for p in sent_with) >= 4  # the workload's shared-prefix part was sent
    return res


def record(tmp_path: Path, res: dict) -> dict:
    args = {name: spec.get("default") for name, spec in speed_record.ARGS.items()}
    args.update(pidfile=str(tmp_path / "run" / "vllm.pid"), root=str(tmp_path), host_label="h1", action="record",
                runs=res["runs"], baseline_runs=res["baseline_runs"], interleaved=True, source="serving-bench",
                load_generator=res["load_generator"], workload=res["workload"])
    return execute(speed_record.ARGS, speed_record.run, args, Context(), "speed_record")


def test_the_drafter_losing_the_prefix_cache_is_said_with_what_to_do(tmp_path):
    res = measure(tmp_path, drafter_hits=False)
    [with_row], [without_row] = res["runs"], res["baseline_runs"]
    assert with_row["prefix_cache_hits"] == 0 and with_row["prefix_cache_queries"] > 100, with_row
    assert without_row["prefix_cache_hit_rate"] > 0.05 and without_row["prefix_cache_queries"] == with_row["prefix_cache_queries"]
    out = record(tmp_path, res)
    seen = out["figures"]["prefix_cache"]["2"]
    assert seen["verdict"] == "lost" and seen["with"] == 0.0 and seen["without"] == without_row["prefix_cache_hit_rate"]
    [warning] = [w for w in out["warnings"] if "prefix cache" in w]
    assert "with the drafter and" in warning and "54360, 51250, 57032" in warning and "drafter_model: null" in warning
    table = SC.bench_table("h1", SC.bench_figures({"speed_record": out}))
    assert "  prefix cache: at concurrency 2 the prefix cache hit 0.0% of prompt tokens with the drafter" in table
    page = host_page("h1", bench=SC.bench_figures({"speed_record": out}))
    assert '<p class="bad">prefix cache: at concurrency 2 the prefix cache hit 0.0%' in page


def test_a_drafter_that_keeps_the_prefix_cache_is_no_warning(tmp_path):
    res = measure(tmp_path, drafter_hits=True)
    out = record(tmp_path, res)
    seen = out["figures"]["prefix_cache"]["2"]
    assert seen["verdict"] == "kept" and seen["with"] > 0.05 and seen["without"] > 0.05, seen
    assert not [w for w in out.get("warnings", []) if "prefix cache" in w]


def test_the_decision_on_figures_a_server_counts():
    # counters reset by a restart between two readings: the reading after is the delta
    assert prefix_delta({"queries": 10.0, "hits": 0.0}, {"queries": 500.0, "hits": 96.0}) == {"queries": 10.0, "hits": 0.0}
    assert prefix_delta({"queries": 900.0, "hits": 192.0}, {"queries": 500.0, "hits": 96.0}) == {"queries": 400.0, "hits": 96.0}
    assert prefix_figures([{"queries": 400.0, "hits": 96.0}, None, {"queries": 100.0, "hits": 4.0}]) == {
        "prefix_cache_queries": 500, "prefix_cache_hits": 100, "prefix_cache_hit_rate": 0.2}
    assert prefix_figures([None])["prefix_cache_hit_rate"] is None
    assert judge(0.0, 0.4) == "lost" and judge(0.03, 0.4) == "lost" and judge(0.2, 0.4) == "kept"
    assert judge(0.0, 0.01) == "no shared prefixes" and judge(None, 0.4) == "unknown"
    said = compare_prefix([{"concurrency": 1, "prefix_cache_hit_rate": 0.0}], [{"concurrency": 1, "prefix_cache_hit_rate": 0.004}])
    assert said["1"]["verdict"] == "no shared prefixes" and "share too little" in said["1"]["says"]
    assert compare_prefix([{"concurrency": 1}], []) == {}  # no baseline: nothing compared


def test_the_builtin_workload_has_a_shared_prefix_part():
    support = [r for r in builtin_requests(256) if r["kind"] == "support"]
    assert len(support) > 40 and all(r["messages"][0]["content"].startswith(SUPPORT_NOTES) for r in support)
    assert len(SUPPORT_NOTES.split()) >= 48  # three 16-word blocks of the stand-in, several KV blocks of vLLM
