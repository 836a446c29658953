"""Is the drafter a speed-up? Ratios against a baseline measured in the same run, and the choice of k.

Used on the host by the speed gate (vllm-service) and on the control node by `invoke tune`. A run is one
concurrency level of a serving benchmark (dflash_host/speed/bench_result.py shape): `concurrency`,
`output_tokens_per_s` and, with a drafter, `per_position_acceptance` (rate per draft position, falling).

Objective of tune: the largest output tokens/s at the configured concurrency (the load the server is
sized for), among the k that beat the baseline by `min_speedup` and are not shown slower; where some k are
shown to pay (their whole interval above min_speedup), only those. Where the measured repetitions give
intervals (dflash_host/speed/stats.py), the smallest k that is not shown slower than the best one, compared
on the two k's own samples (a longer draft costs more and is not shown to pay more; each k's interval against
the baseline carries the baseline's spread, so two such intervals overlap for k far apart in speed, as on the
H200: k=1 1.27x and k=7 1.95x at 16 overlapped). No such k means: serve without drafter. At several
concurrency levels, one choice per level makes a schedule: a k per band of batch sizes (schedule()).
"""

from __future__ import annotations

from typing import Any

from dflash_host.speed.stats import describe, paired_interval, unpaired_interval, verdict

# A draft position accepted less often than this adds a drafting step's cost and (almost) no token:
# no larger k can pay once the last measured position is below it (acceptance per position only falls).
POSITION_FLOOR = 0.05


def by_concurrency(runs: list[dict]) -> dict[int, dict]:
    return {int(r["concurrency"]): r for r in runs if r.get("concurrency") is not None}


def speedups(runs: list[dict], baseline_runs: list[dict]) -> dict[str, float | None]:
    """{"<concurrency>": tokens/s with drafter / tokens/s without}, for each concurrency measured both ways."""
    base = by_concurrency(baseline_runs)
    out: dict[str, float | None] = {}
    for c, run in sorted(by_concurrency(runs).items()):
        if c not in base:
            continue
        with_, without = run.get("output_tokens_per_s"), base[c].get("output_tokens_per_s")
        out[str(c)] = round(with_ / without, 3) if with_ and without else None
    return out


def speedup_by_level(runs: list[dict], baseline_runs: list[dict], comparison: dict | None = None) -> dict[str, float | None]:
    """The one speed-up per level that every report shows (serving-bench's table, JSON and page, `invoke status`,
    the textfile, the gate): the centre of the level's interval where one was measured (compare_levels: the
    geometric mean of the paired ratios), else the ratio of the medians. Two figures for one measurement (0.62x
    in status beside 0.61x in serving-bench) would each be right and together say nothing."""
    ratios = speedups(runs, baseline_runs) if baseline_runs else {}
    return {c: ((comparison or {}).get(c) or {}).get("speedup") or ratio for c, ratio in ratios.items()}


def compare_levels(runs: list[dict], baseline_runs: list[dict], interleaved: bool, threshold: float = 1.0) -> dict:
    """{"<concurrency>": speed-up, its 95 % interval, verdict, sentence} for each level measured both ways: paired
    repetitions when measured in turns, else Welch's interval on the two samples (dflash_host/speed/stats.py)."""
    base = by_concurrency(baseline_runs)
    out = {}
    for c, run in sorted(by_concurrency(runs).items()):
        if c not in base:
            continue
        a = run.get("samples_tokens_per_s") or [run.get("output_tokens_per_s")]
        b = base[c].get("samples_tokens_per_s") or [base[c].get("output_tokens_per_s")]
        interval = paired_interval(a, b) if interleaved else unpaired_interval(a, b)
        word = verdict(interval, threshold)
        out[str(c)] = dict(interval, verdict=word, interleaved=interleaved, threshold=threshold,
                           says=describe(interval, word))
    return out


def larger_k_cannot_pay(per_position: list[float] | None, floor: float = POSITION_FLOOR) -> bool:
    """True when the last measured draft position is (nearly) never accepted: positions after it are
    accepted even less often, so a larger k only adds drafting work."""
    last = per_position[-1] if per_position else None
    return last is not None and float(last) < floor  # None: no draft was made (nothing to judge by)


def choose_k(baseline_runs: list[dict], by_k: dict[int, list[dict]], concurrency: int,
             min_speedup: float = 1.0) -> dict[str, Any]:
    """The k with the best tokens/s at `concurrency` that beats the baseline by min_speedup, or None.

    Returns {"chosen_k", "concurrency", "baseline_tokens_per_s", "table": [{k, tokens_per_s, speedup,
    acceptance_rate}], "recommendation"}."""
    base_run = by_concurrency(baseline_runs).get(concurrency, {})
    base = base_run.get("output_tokens_per_s")
    table = []
    for k in sorted(by_k):
        run = by_concurrency(by_k[k]).get(concurrency, {})
        tps = run.get("output_tokens_per_s")
        interval = unpaired_interval(run.get("samples_tokens_per_s") or [], base_run.get("samples_tokens_per_s") or [])
        word = verdict(interval, min_speedup)
        ratio = round(tps / base, 3) if tps and base else None
        table.append({"k": k, "tokens_per_s": tps, "acceptance_rate": run.get("acceptance_rate"),
                      "speedup": interval["speedup"] or ratio, "low": interval["low"],  # the figure `says` shows
                      "high": interval["high"], "verdict": word, "says": describe(interval, word)})
    best = _best_row(table, by_k, concurrency, min_speedup)
    if not base:
        advice = f"the baseline (no drafter) was not measured at concurrency {concurrency}: no choice"
    elif best is None:
        advice = (f"no k beats serving without the drafter at concurrency {concurrency} (needed speed-up >= "
                  f"{min_speedup:g}); serve without it: drafter_model: null")
    else:
        advice = f"num_speculative_tokens: {best['k']} ({best['speedup']:.2f}x at concurrency {concurrency})"
    return {"chosen_k": best["k"] if best else None, "concurrency": concurrency, "baseline_tokens_per_s": base,
            "min_speedup": min_speedup, "table": table, "recommendation": advice}


def _best_row(table: list[dict], by_k: dict[int, list[dict]], concurrency: int, min_speedup: float) -> dict | None:
    """The fastest candidate row, or the smallest k not shown slower than it on the two k's own samples."""
    candidates = [row for row in table if row["speedup"] is not None and row["speedup"] >= min_speedup
                  and row["verdict"] != "slower"]
    shown = [row for row in candidates if row["verdict"] == "pays"]
    candidates = shown or candidates
    best = max(candidates, key=lambda row: float(row["tokens_per_s"] or 0.0), default=None)
    if best is None:
        return None
    samples = {k: by_concurrency(by_k[k]).get(concurrency, {}).get("samples_tokens_per_s") or [] for k in by_k}
    return next(row for row in candidates
                if row is best or _not_shown_slower(samples[row["k"]], samples[best["k"]]))


def _not_shown_slower(smaller: list, best: list) -> bool:
    """The smaller k's tokens/s against the best k's: their interval reaches 1 (no interval: no evidence)."""
    interval = unpaired_interval(smaller, best)
    return interval["high"] is not None and interval["high"] >= 1.0


def schedule(choices: dict[int, int | None], max_batch: int = 1024) -> list[list[int]]:
    """vLLM's num_speculative_tokens_per_batch_size from one chosen k per measured concurrency (None or 0: no
    k pays there): inclusive bands [start, end, k] from batch size 1, each level's band reaching halfway (in
    ratio) to the next level, the last one to max_batch."""
    levels = sorted(choices)
    out: list[list[int]] = []
    start = 1
    for i, c in enumerate(levels):
        end = max_batch if i == len(levels) - 1 else max(start, int((c * levels[i + 1]) ** 0.5))
        out.append([start, end, int(choices[c] or 0)])
        start = end + 1
    return out


def gate(measured: dict | float | None, min_speedup: float, mode: str, cluster: bool = False) -> tuple[str, str]:
    """The speed gate's verdict: ("ok" | "warn" | "fail", message) from the speed-up's interval. Only `slower`
    (the whole interval below min_speedup) fails; `inconclusive` (no interval, or one straddling it) warns. A
    serving cluster has no tune: its advice is another k through serving-cluster (the gate measures each launch)."""
    interval = measured if isinstance(measured, dict) else {"speedup": measured, "low": None, "high": None}
    if mode == "off":
        return "ok", "speed gate off"
    if interval.get("speedup") is None:
        return "warn", "speed-up could not be measured (no throughput with or without the drafter)"
    word = verdict(interval, min_speedup)
    said = describe(interval, word)
    if word == "pays":
        return "ok", f"the drafter pays: {said} the tokens/s without it (min_speedup {min_speedup:g})"
    if word == "inconclusive":
        return "warn", (f"inconclusive: {said} the tokens/s without it, which does not settle min_speedup "
                        f"{min_speedup:g}; measure longer (speed_repetitions, speed_min_seconds), or "
                        f"{_slower_advice(cluster)}")
    return ("fail" if mode == "fail" else "warn"), (
        f"the drafter makes serving SLOWER: {said} the tokens/s without it (min_speedup {min_speedup:g}); "
        f"{_slower_advice(cluster)}")


def _slower_advice(cluster: bool) -> str:
    if cluster:
        return ("try another num_speculative_tokens with `invoke serving-cluster --group <its group>` (the gate measures "
                "the new launch), or serve without it (drafter_model: null)")
    return "tune k with `invoke tune`, or serve without it (drafter_model: null)"
