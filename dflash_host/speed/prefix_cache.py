"""The prefix-cache hit rate of a measurement, with and without the drafter, and what a lost cache means.

vLLM counts prompt tokens looked up in its prefix cache (`vllm:prefix_cache_queries_total`) and found there
(`vllm:prefix_cache_hits_total`). serving_bench reads both around every repetition, as it reads the spec-decode
counters, so each level's row has the hit rate of exactly the prompts it sent; with the baseline the two
servers get the same prompts in turns. A drafter (DFlash, MTP) on a hybrid-attention target can turn the hits
to 0 with no error (vLLM issues 54360, 51250, 57032): the speed-up measured then includes every shared prefix
computed again. compare_prefix says, per level, what it saw and what to do. A drafter that reads the target's
hidden states (EAGLE, MTP, DFlash) also loses the last cached block of every hit by design (vLLM's
`use_eagle_block_drop`), so its rate is a block per request lower: prompts that share only one KV block read as
lost (the built-in workload's support requests share several). Pure, standard library only.
"""

from __future__ import annotations

ISSUES = "vLLM issues 54360, 51250, 57032"
MIN_BASELINE_RATE = 0.05  # below it the baseline hardly hits: the prompts share too little to judge the drafter
LOST_FRACTION = 0.1  # the drafter's rate under a tenth of the baseline's: the cache is lost, not just smaller


def prefix_delta(after: dict | None, before: dict | None) -> dict | None:
    """The counters accumulated between two readings (a restart resets them: then `after`); None without both."""
    if after is None or before is None:
        return None
    if after["queries"] < before["queries"] or after["hits"] < before["hits"]:
        return dict(after)
    return {"queries": after["queries"] - before["queries"], "hits": after["hits"] - before["hits"]}


def prefix_figures(deltas: list) -> dict:
    """A level's figures over its repetitions: tokens looked up, hit, and the hit rate (None where unknown)."""
    have = [d for d in deltas if d is not None]
    queries = sum(d["queries"] for d in have)
    hits = sum(d["hits"] for d in have)
    return {"prefix_cache_queries": int(queries) if have else None, "prefix_cache_hits": int(hits) if have else None,
            "prefix_cache_hit_rate": round(hits / queries, 4) if queries > 0 else None}


def judge(with_rate: float | None, without_rate: float | None) -> str:
    """lost, kept, no shared prefixes (the baseline hardly hits) or unknown (no counters)."""
    if with_rate is None or without_rate is None:
        return "unknown"
    if without_rate < MIN_BASELINE_RATE:
        return "no shared prefixes"
    return "lost" if with_rate < LOST_FRACTION * without_rate else "kept"


def says(c: int, verdict: str, with_rate: float | None, without_rate: float | None) -> str:
    """What was seen at level c and what to do."""
    seen = (f"at concurrency {c} the prefix cache hit {with_rate:.1%} of prompt tokens with the drafter and "
            f"{without_rate:.1%} without it, on the same prompts" if with_rate is not None and without_rate is not None
            else f"at concurrency {c} the prefix-cache hit rate is unknown (a server exported no prefix_cache counters)")
    if verdict == "lost":
        return (f"{seen}: the drafter loses prefix caching, so every shared prefix is computed again and the "
                f"speed-up above includes that loss. Either a drafter on a hybrid-attention target ({ISSUES}): serve "
                "without the drafter where it does not pay (drafter_model: null, or tune's schedule) or use a vLLM "
                "with the fix; or the prompts share about one KV block, which vLLM drops from every hit for a drafter "
                "that reads the target's hidden states (longer shared prefixes keep the rest). The "
                "DflashPrefixCacheNoHits alert (invoke monitoring) watches the running server")
    if verdict == "no shared prefixes":
        return (f"{seen}: the prompts share too little for the cache to be judged (send prompts that share a "
                "prefix, as the built-in workload's support requests do)")
    return seen


def compare_prefix(runs: list, baseline_runs: list) -> dict:
    """{concurrency (text): {with, without, verdict, says}} for each level measured both ways."""
    base = {r["concurrency"]: r for r in baseline_runs}
    out = {}
    for r in runs:
        b = base.get(r["concurrency"])
        if b is None:
            continue
        with_rate, without_rate = r.get("prefix_cache_hit_rate"), b.get("prefix_cache_hit_rate")
        verdict = judge(with_rate, without_rate)
        out[str(r["concurrency"])] = {"with": with_rate, "without": without_rate, "verdict": verdict,
                                      "says": says(r["concurrency"], verdict, with_rate, without_rate)}
    return out
