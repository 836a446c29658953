"""Parse vLLM's Prometheus /metrics text and compute speculative-decoding acceptance.

vLLM exports prometheus_client Counters, so each counter appears as a `*_total` series (the value)
and a `*_created` series (a timestamp that shares the name prefix and must never be summed). Labels
(model_name, engine, position) split a counter into several series: sum them per counter.

acceptance rate        = accepted tokens / draft tokens
mean acceptance length = 1 + accepted tokens / drafts       (tokens gained per target step)
per-position rate[i]   = accepted tokens at position i / drafts

Pure functions, standard library only; used by vllm.ready (after the smoke traffic), vllm.status
(invoke status) and, through the front, serving_bench and dflash_host.speed (deltas over each load run).
"""

from __future__ import annotations

import math
import re
from typing import Any

PREFIX = "vllm:spec_decode_"
DRAFTS = PREFIX + "num_drafts_total"
DRAFT_TOKENS = PREFIX + "num_draft_tokens_total"
ACCEPTED = PREFIX + "num_accepted_tokens_total"
ACCEPTED_PER_POS = PREFIX + "num_accepted_tokens_per_pos_total"

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_samples(text: str) -> list:
    """Every sample line as (name, labels dict, float value); comments and junk lines are skipped."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(m.group("labels") or ""))
        out.append((m.group("name"), labels, value))
    return out


def spec_decode_counters(text: str) -> dict | None:
    """Sum the spec-decode `_total` counters over their label sets.

    Returns {"drafts", "draft_tokens", "accepted", "per_position": {int: float}}, or None when the
    server exports no spec-decode counters at all (speculative decoding is not configured).
    """
    found = False
    totals: dict[str, Any] = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0}
    per_pos: dict = {}
    names = {DRAFTS: "drafts", DRAFT_TOKENS: "draft_tokens", ACCEPTED: "accepted"}
    for name, labels, value in parse_samples(text):
        if not name.endswith("_total") or math.isnan(value):
            continue
        if name in names:
            totals[names[name]] += value
            found = True
        elif name == ACCEPTED_PER_POS:
            try:
                pos = int(labels.get("position", ""))
            except ValueError:
                continue
            per_pos[pos] = per_pos.get(pos, 0.0) + value
            found = True
    if not found:
        return None
    totals["per_position"] = per_pos
    return totals


PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"


def prefix_cache_counters(text: str) -> dict | None:
    """{"queries", "hits"}: prompt tokens looked up in vLLM's prefix cache and found there, summed over their
    label sets; None when the server exports neither."""
    out = {"queries": 0.0, "hits": 0.0}
    found = False
    for name, _labels, value in parse_samples(text):
        key = {PREFIX_QUERIES: "queries", PREFIX_HITS: "hits"}.get(name)
        if key is not None and not math.isnan(value):
            out[key] += value
            found = True
    return out if found else None


def delta(after: dict | None, before: dict | None) -> dict | None:
    """Counters accumulated between two readings (a server restart resets them: then use `after`)."""
    if after is None:
        return None
    if before is None or any(after[k] < before[k] for k in ("drafts", "draft_tokens", "accepted")):
        return after
    per_pos = {pos: value - before.get("per_position", {}).get(pos, 0.0) for pos, value in after["per_position"].items()}
    out = {k: after[k] - before[k] for k in ("drafts", "draft_tokens", "accepted")}
    out["per_position"] = per_pos
    return out


def acceptance(counters: dict | None) -> dict:
    """Acceptance figures from (delta) counters; rates are None when no draft happened."""
    if counters is None:
        return {
            "spec_decode": False,
            "drafts": 0,
            "draft_tokens": 0,
            "accepted_tokens": 0,
            "acceptance_rate": None,
            "mean_acceptance_length": None,
            "per_position_acceptance": [],
        }
    drafts, draft_tokens, accepted = counters["drafts"], counters["draft_tokens"], counters["accepted"]
    per_pos = counters.get("per_position", {})
    return {
        "spec_decode": True,
        "drafts": int(drafts),
        "draft_tokens": int(draft_tokens),
        "accepted_tokens": int(accepted),
        "acceptance_rate": round(accepted / draft_tokens, 4) if draft_tokens > 0 else None,
        "mean_acceptance_length": round(1.0 + accepted / drafts, 4) if drafts > 0 else None,
        "per_position_acceptance": [round(per_pos[pos] / drafts, 4) if drafts > 0 else None for pos in sorted(per_pos)],
    }


def per_position_counts(counters: dict | None) -> list:
    """Accepted tokens at each draft position (position 0 first), as integers; [] without counters.

    With a drafter that always agrees every position is accepted in every draft, so all are equal
    (and equal to the drafts); the rates in acceptance() hide rounding, the counts do not."""
    if not counters:
        return []
    per_pos = counters.get("per_position", {})
    return [int(round(per_pos[pos])) for pos in sorted(per_pos)]


def gate(figures: dict, min_rate: float | None, mode: str) -> tuple:
    """Decide what the acceptance figures mean: ("ok" | "warn" | "fail", sentence)."""
    rate = figures.get("acceptance_rate")
    if not figures.get("spec_decode"):
        return "warn", "the server exports no spec_decode metrics: speculative decoding is not active"
    if rate is None:
        return "warn", "no draft tokens were proposed during the smoke traffic, so acceptance is unknown"
    summary = (
        f"acceptance rate {rate:.1%} over {figures['draft_tokens']} draft tokens, "
        f"mean acceptance length {figures['mean_acceptance_length']:.2f}"
    )
    if min_rate is None or rate >= min_rate:
        return "ok", summary
    verdict = "fail" if mode == "fail" else "warn"
    return verdict, (
        f"{summary}: below min_acceptance_rate {min_rate:.1%} (check the drafter's target_layer_ids, "
        "mask_token_id and that the drafter was trained for this target)"
    )
