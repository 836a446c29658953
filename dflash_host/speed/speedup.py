"""Is the drafter a speed-up? Ratios against a baseline measured in the same run, and the choice of k.

Used on the host by the speed gate (vllm-service) and on the control node by `invoke tune`. A run is one
concurrency level of a serving benchmark (dflash_host/speed/bench_result.py shape): `concurrency`,
`output_tokens_per_s` and, with a drafter, `per_position_acceptance` (rate per draft position, falling).

Objective of tune: the largest output tokens/s at the configured concurrency (the load the server is
sized for), among the k that beat the baseline by `min_speedup`; no such k means: serve without drafter.
"""

from __future__ import annotations

from typing import Any

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


def larger_k_cannot_pay(per_position: list[float] | None, floor: float = POSITION_FLOOR) -> bool:
    """True when the last measured draft position is (nearly) never accepted: positions after it are
    accepted even less often, so a larger k only adds drafting work."""
    return bool(per_position) and float((per_position or [1.0])[-1]) < floor


def choose_k(baseline_runs: list[dict], by_k: dict[int, list[dict]], concurrency: int,
             min_speedup: float = 1.0) -> dict[str, Any]:
    """The k with the best tokens/s at `concurrency` that beats the baseline by min_speedup, or None.

    Returns {"chosen_k", "concurrency", "baseline_tokens_per_s", "table": [{k, tokens_per_s, speedup,
    acceptance_rate}], "recommendation"}."""
    base = by_concurrency(baseline_runs).get(concurrency, {}).get("output_tokens_per_s")
    table = []
    for k in sorted(by_k):
        run = by_concurrency(by_k[k]).get(concurrency, {})
        tps = run.get("output_tokens_per_s")
        table.append({"k": k, "tokens_per_s": tps, "acceptance_rate": run.get("acceptance_rate"),
                      "speedup": round(tps / base, 3) if tps and base else None})
    paying = [row for row in table if row["speedup"] is not None and row["speedup"] >= min_speedup]
    best = max(paying, key=lambda row: float(row["tokens_per_s"] or 0.0), default=None)
    if not base:
        advice = f"the baseline (no drafter) was not measured at concurrency {concurrency}: no choice"
    elif best is None:
        advice = (f"no k beats serving without the drafter at concurrency {concurrency} (needed speed-up >= "
                  f"{min_speedup:g}); serve without it: drafter_model: null")
    else:
        advice = f"num_speculative_tokens: {best['k']} ({best['speedup']:.2f}x at concurrency {concurrency})"
    return {"chosen_k": best["k"] if best else None, "concurrency": concurrency, "baseline_tokens_per_s": base,
            "min_speedup": min_speedup, "table": table, "recommendation": advice}


def gate(speedup: float | None, min_speedup: float, mode: str, cluster: bool = False) -> tuple[str, str]:
    """The speed gate's verdict: ("ok" | "warn" | "fail", message). A serving cluster has no tune: its advice is
    another k through serving-cluster (the gate measures each new launch)."""
    if mode == "off":
        return "ok", "speed gate off"
    if speedup is None:
        return "warn", "speed-up could not be measured (no throughput with or without the drafter)"
    if speedup >= min_speedup:
        return "ok", f"the drafter pays: {speedup:.2f}x the tokens/s without it (min_speedup {min_speedup:g})"
    verdict = "fail" if mode == "fail" else "warn"
    return verdict, (f"the drafter makes serving SLOWER: {speedup:.2f}x the tokens/s without it (min_speedup "
                     f"{min_speedup:g}); {_slower_advice(cluster)}")


def _slower_advice(cluster: bool) -> str:
    if cluster:
        return ("try another num_speculative_tokens with `invoke serving-cluster --group <its group>` (the gate measures "
                "the new launch), or serve without it (drafter_model: null)")
    return "tune k with `invoke tune`, or serve without it (drafter_model: null)"
