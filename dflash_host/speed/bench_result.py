"""The serving benchmark's figures: percentiles, one run's row, and the speed-up against a baseline.

A run's row joins what the load generator measured (output tokens/s, TTFT and TPOT per request) with
what the server counted while the load ran (the spec-decode `_total` counters' deltas, vllm.metrics).
Both load generators (vllm bench serve's saved JSON, the built-in client's per-request records) are
reduced to the same `load` dict here, so a row means the same whichever produced it:

  requests, completed, failed, duration_s, output_tokens, output_tokens_per_s,
  ttft_ms_p50, ttft_ms_p99, tpot_ms_p50, tpot_ms_p99

TPOT is vllm bench serve's: (latency - TTFT) / (output tokens - 1), per request with more than one
output token. Percentiles interpolate linearly between the closest ranks (numpy's default, which
vllm bench serve uses). Pure functions, standard library only; used by library/serving_bench.py and
by the control side that compares a run with a baseline run.
"""

from __future__ import annotations

from dflash_host.speed.stats import median
from dflash_host.vllm import acceptance, per_position_counts

LOAD_KEYS = ("requests", "completed", "failed", "duration_s", "input_tokens", "output_tokens", "output_tokens_per_s",
             "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99")
SUMMED = ("requests", "completed", "failed", "duration_s", "input_tokens", "output_tokens")  # over repetitions


def percentile(values: list, p: float) -> float | None:
    """The p-th percentile (0-100) with linear interpolation between closest ranks; None for no values."""
    data = sorted(values)
    if not data:
        return None
    rank = (len(data) - 1) * p / 100.0
    low = int(rank)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (rank - low)


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def load_from_requests(records: list, duration_s: float) -> dict:
    """The load dict from the built-in client's records [{ok, ttft_s, latency_s, output_tokens, error}]."""
    done = [r for r in records if r.get("ok")]
    ttfts = [r["ttft_s"] * 1000.0 for r in done]
    tpots = [(r["latency_s"] - r["ttft_s"]) * 1000.0 / (r["output_tokens"] - 1) for r in done if r["output_tokens"] > 1]
    tokens = sum(r["output_tokens"] for r in done)
    prompt_tokens = [r.get("prompt_tokens") for r in done]
    return {
        "input_tokens": sum(prompt_tokens) if done and all(isinstance(t, int) for t in prompt_tokens) else None,
        "requests": len(records),
        "completed": len(done),
        "failed": len(records) - len(done),
        "duration_s": round(duration_s, 3),
        "output_tokens": tokens,
        "output_tokens_per_s": round(tokens / duration_s, 3) if duration_s > 0 else None,
        "ttft_ms_p50": _ms(percentile(ttfts, 50)),
        "ttft_ms_p99": _ms(percentile(ttfts, 99)),
        "tpot_ms_p50": _ms(percentile(tpots, 50)),
        "tpot_ms_p99": _ms(percentile(tpots, 99)),
    }


def _number(data: dict, key: str) -> float | None:
    value = data.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def load_from_vllm_bench(data: dict, requests: int) -> dict:
    """The load dict from vllm bench serve's saved result (run with --metric-percentiles 50,99)."""
    completed = int(_number(data, "completed") or 0)
    failed = _number(data, "failed")
    out_tps = _number(data, "output_throughput")
    duration = _number(data, "duration")
    return {
        "requests": requests,
        "completed": completed,
        "failed": int(failed) if failed is not None else requests - completed,
        "duration_s": round(duration, 3) if duration is not None else None,
        "input_tokens": int(_number(data, "total_input_tokens") or 0) or None,
        "output_tokens": int(_number(data, "total_output_tokens") or 0),
        "output_tokens_per_s": round(out_tps, 3) if out_tps is not None else None,
        "ttft_ms_p50": _ms(_number(data, "p50_ttft_ms")),
        "ttft_ms_p99": _ms(_number(data, "p99_ttft_ms")),
        "tpot_ms_p50": _ms(_number(data, "p50_tpot_ms")),
        "tpot_ms_p99": _ms(_number(data, "p99_tpot_ms")),
    }


def run_row(concurrency: int, load: dict, counters: dict | None, generator: str) -> dict:
    """One concurrency level's row: the load's figures plus acceptance from the counters' deltas.

    counters: vllm.metrics.delta() of the spec-decode counters over the run (None: the server exports
    none, i.e. it runs without a drafter; the acceptance fields are then None / empty)."""
    figures = acceptance(counters)
    row: dict = {"concurrency": concurrency}
    row.update({k: load.get(k) for k in LOAD_KEYS})
    row.update(
        spec_decode=figures["spec_decode"],
        acceptance_rate=figures["acceptance_rate"],
        mean_acceptance_length=figures["mean_acceptance_length"],
        per_position_acceptance=figures["per_position_acceptance"],
        drafts=figures["drafts"],
        draft_tokens=figures["draft_tokens"],
        accepted_tokens=figures["accepted_tokens"],
        per_position_accepted=per_position_counts(counters),
        load_generator=generator,
    )
    return row


def summary(runs: list) -> str:
    """One line per the module contract: tokens/s and acceptance per concurrency level."""
    parts = []
    for r in runs:
        tps = r.get("output_tokens_per_s")
        part = f"c={r['concurrency']}: {tps:.1f} tok/s" if tps is not None else f"c={r['concurrency']}: no tokens"
        if r.get("acceptance_rate") is not None:
            part += f", acceptance {r['acceptance_rate']:.1%}, mean length {r['mean_acceptance_length']:.2f}"
        parts.append(part)
    return "; ".join(parts)


def sum_counters(counters: list) -> dict | None:
    """The spec-decode counters of several repetitions added up (None: no repetition had any)."""
    have = [c for c in counters if c is not None]
    if not have:
        return None
    out: dict = {k: sum(c[k] for c in have) for k in ("drafts", "draft_tokens", "accepted")}
    out["per_position"] = {}
    for c in have:
        for pos, value in c.get("per_position", {}).items():
            out["per_position"][pos] = out["per_position"].get(pos, 0.0) + value
    return out


def aggregate_row(concurrency: int, loads: list, counters: list, generator: str) -> dict:
    """One level's row over its repetitions: medians of the rates and times, sums of the counts, acceptance from
    the summed counters, and each repetition's tokens/s (`samples_tokens_per_s`, what the interval is made of)."""
    load: dict = {}
    for key in LOAD_KEYS:
        values = [x[key] for x in loads if x.get(key) is not None]
        if key in SUMMED:
            load[key] = round(sum(values), 3) if values and key == "duration_s" else (sum(values) if values else None)
        else:
            mid = median(values)
            load[key] = round(mid, 3) if mid is not None else None
    row = run_row(concurrency, load, sum_counters(counters), generator)
    row["repetitions"] = len(loads)
    row["samples_tokens_per_s"] = [x.get("output_tokens_per_s") for x in loads]
    return row
