"""Measure the running vLLM server under closed-loop load: tokens/s, TTFT, TPOT and the drafter's acceptance,
repeated, and (with baseline_pidfile) interleaved with the same launch without its drafter.

A measurement: no server is started, stopped or reconfigured here (changed is always False; check mode measures
nothing). For each concurrency level C: a warm-up (discarded; it also sizes the repetitions), then `repetitions`
repetitions of at least `min_seconds` (or `requests` requests), each with at most C requests in flight. With a
baseline server the two take turns (A B A B ...), so drift of the machine hits both. /metrics is read around each
repetition; the spec-decode `_total` counters' deltas give the acceptance, the prefix-cache ones the hit rate
of each row (`prefix_cache_hit_rate`; speed_record compares it with the baseline's: dflash_host/speed/prefix_cache.py). A level's row holds the medians over
its repetitions and each repetition's tokens/s; `comparison` gives, per level, the speed-up with its 95 %
interval and the verdict (pays, slower, inconclusive: dflash_host/speed/stats.py).

The workload (dflash_host/speed/workload.py): the operator's prompts file (pushed to the host, `prompts_file`),
the built-in mixed workload, or random tokens; each result names it. `check_only` checks the workload against
the configured server (every request fits max_model_len, through its /tokenize) and measures nothing: the
playbook runs it before any server is touched. The load comes from `vllm bench serve` or the built-in client
(dflash_host/speed/generator.py). The API key goes to the load generator through its environment or a header,
never argv or the result.
"""

from __future__ import annotations

import json
import math
import re
import time

from dflash_host.host.files import read_bytes
from dflash_host.module import Context, ModuleError, main
from dflash_host.speed.bench_result import aggregate_row, summary
from dflash_host.speed.generator import LoadGenerator
from dflash_host.speed.prefix_cache import prefix_delta, prefix_figures
from dflash_host.speed.speedup import compare_levels
from dflash_host.speed.workload import WorkloadError, builtin_requests, cycle, describe_builtin, describe_file, parse_prompts
from dflash_host.vllm import base_url, delta, paths, prefix_cache_counters, read_env, read_launch, request, spec_decode_counters

ARGS = {
    "pidfile": {"include": "vllm_pidfile", "help": "the managed server's pidfile: its launch record gives the address, served model, tokenizer and API key"},
    "url": {"type": "str", "default": None,
            "help": "base URL of the server (http://HOST:PORT); none: the launch record's host and port"},
    "model": {"type": "str", "default": None,
              "help": "served model name to request; none: the launch record's, else the first of /v1/models"},
    "tokenizer": {"type": "str", "default": None,
                  "help": "tokenizer for vllm bench serve's random prompts; none: the launch record's target model"},
    "venv_python": {"type": "path", "default": None, "var": "venv_python",
                    "help": "the serving environment's python; vllm bench serve is the `vllm` beside it"},
    "concurrency": {"type": "list", "default": [1, 16], "var": "speed_concurrency",
                    "help": "closed-loop concurrency levels, run in this order (a list, or \"1,16\")"},
    "requests": {"type": "int", "default": None, "var": "speed_requests",
                 "help": "requests per level; none: 4 x the concurrency, at least 8"},
    "max_tokens": {"type": "int", "default": 256, "var": "speed_max_tokens",
                   "help": "output tokens per request (ignore_eos: exactly this many)"},
    "input_len": {"type": "int", "default": 128, "var": "speed_input_len", "help": "prompt tokens per request"},
    "load_generator": {"type": "str", "default": "auto", "choices": ["auto", "vllm", "builtin"], "var": "speed_load_generator",
                       "help": "auto: vllm bench serve, else the built-in client (saying why); vllm: only vllm bench "
                       "serve; builtin: only the built-in client"},
    "seed": {"type": "int", "default": 0, "help": "seed of the random prompts"},
    "baseline_pidfile": {"type": "path", "default": None,
                         "help": "a measurement server without the drafter (vllm_variant's pidfile): measured in turns "
                         "with this one (A B A B), the speed-up and its interval in `comparison`"},
    "workload": {"type": "str", "default": None, "choices": ["builtin", "random", "file"], "var": "speed_workload",
                 "help": "what is sent: file (prompts_file), builtin (mixed chat, code, math, summaries) or random "
                 "tokens; none: file when prompts_file is given, else builtin"},
    "prompts_file": {"type": "path", "default": None,
                     "help": "the operator's prompts (JSONL) on the host; the playbook pushes speed_prompts there"},
    "prompts_source": {"type": "str", "default": None, "help": "the prompts file's name on the control node (reported)"},
    "temperature": {"type": "float", "default": 0.0, "var": "speed_temperature",
                    "help": "sampling temperature of every request (0: greedy), as the operator serves"},
    "repetitions": {"type": "int", "default": 3, "var": "speed_repetitions",
                    "help": "measured repetitions per level (after a discarded warm-up); the interval needs 2 or more"},
    "min_seconds": {"type": "float", "default": 20.0, "var": "speed_min_seconds",
                    "help": "each repetition lasts at least this long (sized from the warm-up), or `requests` requests"},
    "warmup": {"type": "bool", "default": True, "var": "speed_warmup", "help": "run a discarded warm-up per level"},
    "min_speedup": {"type": "float", "default": 1.0, "var": "min_speedup",
                    "help": "the speed-up a verdict of `pays` needs over its whole interval"},
    "check_only": {"type": "bool", "default": False,
                   "help": "check the workload against the server (max_model_len) and measure nothing"},
    "timeout_s": {"type": "float", "default": 1800, "help": "limit per concurrency level, in seconds"},
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("venv_python", "prompts_file", "pidfile", "baseline_pidfile", "url", "tokenizer")

SETTLE_S = 3.0  # the last steps' counters reach /metrics shortly after the last response
MAX_SIZE_FACTOR = 50  # a repetition sized from the warm-up sends at most this many times `requests`
BUILTIN_COUNT = 256


def concurrency_levels(value: list) -> list:
    """[1, 16] from [1, 16], ["1", "16"] or ["1,16"]; every level a positive integer."""
    levels = []
    for item in value:
        for word in str(item).replace(" ", "").split(","):
            if not word:
                continue
            try:
                level = int(word)
            except ValueError:
                level = 0
            if level < 1:
                raise ModuleError(f"serving_bench: concurrency {word!r} is not a positive integer; give e.g. [1, 16] or \"1,16\"")
            levels.append(level)
    if not levels:
        raise ModuleError("serving_bench: concurrency is empty; give at least one level, e.g. [1, 16]")
    return levels


def _target_path(launch: dict) -> str | None:
    target = (launch.get("models") or {}).get("target") or {}
    return target.get("path") or target.get("hub_id")


def server_from_args(args: dict) -> dict:
    """{url, model, tokenizer, api_key, server_env, speculative}: from the launch record, then the overrides."""
    launch, env = None, {}
    if args["pidfile"]:
        p = paths(args["pidfile"])
        launch = read_launch(p["launch"])
        if launch is not None:
            env = read_env(p)
    if launch is None and not args["url"]:
        where = f" ({paths(args['pidfile'])['launch']} is missing)" if args["pidfile"] else ""
        raise ModuleError(
            f"serving_bench: no server to measure: no vLLM launch record{where} and no url; provision the host "
            "first (invoke provision) or give url=http://HOST:PORT"
        )
    launch = launch or {}
    url = args["url"].rstrip("/") if args["url"] else base_url(launch.get("host", "127.0.0.1"), launch.get("port", 8000))
    return {
        "url": url,
        "model": args["model"] or launch.get("served_model_name"),
        "tokenizer": args["tokenizer"] or _target_path(launch),
        "api_key": env.get("VLLM_API_KEY"),
        "server_env": env,
        "speculative": launch.get("speculative"),
    }


def check_serving(server: dict, args: dict) -> int | None:
    """The server answers /health and serves the model (chosen into server["model"]); its max_model_len."""
    health = request(server["url"] + "/health", timeout=5)
    if health.status != 200:
        raise ModuleError(
            f"serving_bench: no healthy vLLM at {server['url']} (/health: {health.describe()}); start it "
            "(invoke provision or restart-server) or fix url"
        )
    models = request(server["url"] + "/v1/models", timeout=10, api_key=server["api_key"])
    data = models.json() if models.status == 200 else None
    entries = [m for m in (data or {}).get("data", []) if isinstance(m, dict)] if isinstance(data, dict) else []
    if not entries:
        raise ModuleError(f"serving_bench: {server['url']}/v1/models lists no model ({models.describe()}); check the API key and the server")
    chosen = next((m for m in entries if m.get("id") == server["model"]), None) if server["model"] else entries[0]
    if chosen is None:
        names = ", ".join(str(m.get("id")) for m in entries)
        raise ModuleError(f"serving_bench: the server serves {names}, not {server['model']!r}; fix model (served_model_name)")
    server["model"] = chosen.get("id")
    limit = chosen.get("max_model_len")
    return limit if isinstance(limit, int) else None


def read_counters(url: str) -> tuple:
    """(answered, (spec-decode counters or None, prefix-cache counters or None)) from /metrics."""
    res = request(url + "/metrics", timeout=10)
    if res.status != 200:
        return False, (None, None)
    text = res.body.decode("utf-8", "replace")
    return True, (spec_decode_counters(text), prefix_cache_counters(text))


def settled_counters(url: str) -> tuple:
    """/metrics once the counters stop moving (two equal readings 0.25 s apart), within SETTLE_S."""
    deadline = time.monotonic() + SETTLE_S
    ok, last = read_counters(url)
    while ok and time.monotonic() < deadline:
        time.sleep(0.25)
        ok, now = read_counters(url)
        if now == last:
            return ok, now
        last = now
    return ok, last


def load_workload(args: dict) -> dict:
    """{name, items, description} of what is sent; WorkloadError (a clear message) for a bad prompts file."""
    name = args["workload"] or ("file" if args["prompts_file"] else "builtin")
    if name == "file":
        if not args["prompts_file"]:
            raise ModuleError("serving_bench: workload file needs prompts_file (set speed_prompts to a JSONL file on the "
                              "control node; the playbook pushes it)")
        raw = read_bytes(args["prompts_file"])
        if raw is None:
            raise ModuleError(f"serving_bench: {args['prompts_file']}: no such file; set speed_prompts to a JSONL file")
        shown = args["prompts_source"] or args["prompts_file"]
        try:
            items = parse_prompts(raw, shown)
        except WorkloadError as exc:
            raise ModuleError(f"serving_bench: {exc}") from None
        return {"name": "file", "items": items, "description": describe_file(raw, items, shown)}
    if name == "builtin":
        items = builtin_requests(BUILTIN_COUNT)
        return {"name": "builtin", "items": items, "description": describe_builtin(items)}
    return {"name": "random", "items": [], "description": {"name": "random", "input_len": args["input_len"]}}


def check_lengths(server: dict, workload: dict, args: dict, limit: int | None) -> None:
    """Every request's prompt (as the server tokenizes it, chat template included) plus its max_tokens fits
    max_model_len; else one message naming what does not fit and advice that fits every request (the largest
    max_tokens, the lines to shorten, the max_model_len that would take them). Skipped where the server has no
    /tokenize."""
    if workload["name"] == "random":
        if isinstance(limit, int) and args["input_len"] + args["max_tokens"] > limit:
            raise ModuleError(f"serving_bench: input_len {args['input_len']} + max_tokens {args['max_tokens']} exceed "
                              f"the server's max_model_len {limit}; lower max_tokens to {max(limit - args['input_len'], 0)} "
                              "or less (--max-tokens, speed_max_tokens), or input_len (speed_input_len)")
        return
    lengths = prompt_lengths(server, workload, limit)
    if lengths is None:
        return
    problem = length_problem(lengths, workload, args["max_tokens"])
    if problem:
        raise ModuleError(f"serving_bench: {problem}")


def prompt_lengths(server: dict, workload: dict, limit: int | None) -> dict | None:
    """{limit, rows: [(where, prompt tokens or None when the server refused it as too long, own max_tokens)]}
    for each distinct request, through the server's /tokenize; None where it cannot say (no such endpoint)."""
    shown = workload["description"].get("file") or "the built-in workload"
    rows, seen = [], set()
    for number, item in enumerate(workload["items"], start=1):
        key = json.dumps({k: v for k, v in item.items() if k != "line"}, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        body = {"model": server["model"], **({"messages": item["messages"]} if "messages" in item else {"prompt": item["prompt"]})}
        res = request(server["url"] + "/tokenize", body, timeout=30, api_key=server["api_key"])
        if item.get("line"):
            where = f"{shown} line {item['line']}"
        else:
            where = f"request {number}" + (f" ({item['kind']})" if item.get("kind") else "")
        if res.status == 400 and re.search(rb"context length|max_model_len|too long", res.body, re.I):
            rows.append((where, None, item.get("max_tokens")))
            continue
        data = res.json() if res.status == 200 else None
        if not isinstance(data, dict) or not isinstance(data.get("count"), int):
            return None
        limit = data.get("max_model_len") if isinstance(data.get("max_model_len"), int) else limit
        rows.append((where, data["count"], item.get("max_tokens")))
    return {"limit": limit, "rows": rows} if isinstance(limit, int) else None


def length_problem(lengths: dict, workload: dict, max_tokens: int) -> str | None:
    """What does not fit max_model_len and the fix that makes every request fit, in one paragraph; None: all fit.
    A prompt that fills the context alone must be shortened; a request with its own max_tokens is fixed on its
    line; the others share max_tokens: the advice is the largest value that fits the longest of them."""
    limit, rows = lengths["limit"], lengths["rows"]
    too_long = [where for where, count, _ in rows if count is None or count >= limit]
    own = [(where, count, mine) for where, count, mine in rows if count is not None and count < limit and mine
           and count + mine > limit]
    shared = [(where, count) for where, count, mine in rows if count is not None and count < limit and not mine]
    over = [(where, count) for where, count in shared if count + max_tokens > limit]
    if not (too_long or own or over):
        return None
    what = workload["description"].get("file") or "the built-in workload"
    fixes, need = [], max((c + (m or max_tokens) for _, c, m in rows if c is not None), default=limit)
    if too_long:
        fixes.append(f"shorten {_some(too_long)}: {'its prompt is' if len(too_long) == 1 else 'their prompts are'} "
                     f"{limit} tokens or longer, beyond max_model_len whatever max_tokens")
    for where, count, mine in own:
        fixes.append(f"{where} asks for max_tokens {mine} of its own after a {count}-token prompt: lower it to "
                     f"{limit - count} or less")
    if over:
        where, longest = max(over, key=lambda r: r[1])
        fit = limit - max(count for _, count in shared)
        fixes.append(f"max_tokens {max_tokens} does not fit {len(over)} of {len(rows)} requests (the longest, {where}, "
                     f"is a {longest}-token prompt): lower it to {fit} or less (--max-tokens {fit}, or speed_max_tokens)")
    known = all(count is not None for _, count, _ in rows)
    alt = "" if not known else (f"; or serve a longer context: max_model_len {need} or more (the inventory variable "
                                f"max_model_len; a model allows at most its max_position_embeddings)")
    return f"{what} does not fit the server's max_model_len {limit}: " + "; ".join(fixes) + alt


def _some(wheres: list) -> str:
    return ", ".join(wheres[:5]) + (f" and {len(wheres) - 5} more" if len(wheres) > 5 else "")


def measure_once(gen: LoadGenerator, level: dict, ctx: Context) -> tuple:
    """/metrics before, one repetition's load, /metrics after: (load, spec-decode delta or None, prefix-cache
    delta or None)."""
    ok_before, before = settled_counters(level["url"])
    load = gen.run(level)
    ok_after, after = settled_counters(level["url"])
    if not (ok_before and ok_after):
        ctx.warn(f"/metrics of {level['url']} did not answer around concurrency {level['concurrency']}: its acceptance is unknown")
    if load["failed"]:
        ctx.warn(f"{load['failed']} of {load['requests']} requests failed at concurrency {level['concurrency']} ({level['url']})")
    if not (ok_before and ok_after):
        return load, None, None
    return load, delta(after[0], before[0]), prefix_delta(after[1], before[1])


def sized_requests(warm: list, args: dict, base: int) -> int:
    """Requests per repetition: enough for every server to last min_seconds at its warm-up rate, at least `base`."""
    rates = [w["completed"] / w["duration_s"] for w in warm if w.get("duration_s") and w.get("completed")]
    if not rates:
        return base
    return min(base * MAX_SIZE_FACTOR, max(base, math.ceil(args["min_seconds"] * max(rates))))


def measure_level(targets: list, c: int, args: dict, workload: dict, ctx: Context) -> dict:
    """Warm-up, then the repetitions of every target in turns: {target name: aggregated row}."""
    base = args["requests"] or max(8, 4 * c)
    level = {"concurrency": c, "input_len": args["input_len"], "max_tokens": args["max_tokens"], "seed": args["seed"],
             "temperature": args["temperature"], "requests": base}

    def at(target: dict, count: int, start: int) -> dict:
        server = target["server"]
        return dict(level, url=server["url"], model=server["model"], tokenizer=server["tokenizer"], requests=count,
                    items=cycle(workload["items"], count, start) if workload["items"] else [])

    warm = [measure_once(t["gen"], at(t, base, 0), ctx)[0] for t in targets] if args["warmup"] else []
    count = sized_requests(warm, args, base)
    loads: dict = {t["name"]: ([], [], []) for t in targets}
    for r in range(args["repetitions"]):
        for t in targets:
            ctx.say(f"serving_bench: concurrency {c}, {t['name']} the drafter, repetition {r + 1} of "
                    f"{args['repetitions']}, {count} requests ({t['gen'].label})")
            for kept, value in zip(loads[t["name"]], measure_once(t["gen"], at(t, count, base + r * count), ctx)):
                kept.append(value)  # the load, the spec-decode delta, the prefix-cache delta
    return {t["name"]: dict(aggregate_row(c, *loads[t["name"]][:2], t["gen"].label), **prefix_figures(loads[t["name"]][2]))
            for t in targets}


def headless_node(args: dict) -> dict | None:
    """The cluster record when the configured launch is a headless node of a serving cluster (no API here:
    the cluster is measured at its head), else None."""
    if args["url"] or not args["pidfile"]:
        return None
    cluster = (read_launch(paths(args["pidfile"])["launch"]) or {}).get("cluster") or {}
    return cluster if cluster.get("role") == "worker" else None


def targets_for(args: dict, server: dict, workload: dict) -> list:
    """The configured server ("with") and, given baseline_pidfile, the measurement server without it."""
    out = [{"name": "with", "server": server}]
    if args["baseline_pidfile"]:
        other = server_from_args(dict(args, pidfile=args["baseline_pidfile"], url=None))
        check_serving(other, args)
        out.append({"name": "without", "server": other})
    runner = None
    for t in out:
        t["gen"] = LoadGenerator(args["load_generator"], args["venv_python"], t["server"], args["timeout_s"], workload,
                                 runner)
        runner = runner or t["gen"].runner
    return out


def check_sizes(args: dict) -> None:
    for name in ("max_tokens", "input_len", "requests", "repetitions"):
        if args[name] is not None and args[name] < 1:
            raise ModuleError(f"serving_bench: {name} is {args[name]}; it must be at least 1")
    if args["timeout_s"] <= 0 or args["min_seconds"] < 0 or args["temperature"] < 0:
        raise ModuleError("serving_bench: timeout_s must be more than 0, min_seconds and temperature at least 0")


def run(args: dict, ctx: Context) -> dict:
    levels = concurrency_levels(args["concurrency"])
    check_sizes(args)
    node = headless_node(args)
    if node:
        return {"changed": False, "headless_node": True, "runs": [],
                "msg": f"headless node rank {node.get('node_rank')} of a serving cluster: no API here; the cluster is "
                f"measured at its head ({node.get('master_addr')})"}
    workload = load_workload(args)
    server = server_from_args(args)
    settings = {"input_len": args["input_len"], "max_tokens": args["max_tokens"], "temperature": args["temperature"],
                "ignore_eos": workload["name"] == "random", "concurrency": levels, "repetitions": args["repetitions"],
                "min_seconds": args["min_seconds"], "warmup": args["warmup"],
                "interleaved": bool(args["baseline_pidfile"])}
    out = {"changed": False, "url": server["url"], "speculative": server["speculative"], "settings": settings,
           "workload": workload["description"]}
    if ctx.check:
        out.update(msg=f"would measure {server['url']} at concurrency {', '.join(map(str, levels))} (check mode: "
                   "nothing measured)", runs=[])
        return out
    limit = check_serving(server, args)
    check_lengths(server, workload, args, limit)
    if args["check_only"]:
        out.update(runs=[], msg=f"the workload ({workload['description']['name']}, {len(workload['items']) or 'random'} "
                   "requests) fits the server")
        return out
    started = time.monotonic()
    targets = targets_for(args, server, workload)
    try:
        rows = [measure_level(targets, c, args, workload, ctx) for c in levels]
    finally:
        for t in targets:
            t["gen"].close()
    runs = [r["with"] for r in rows]
    baseline_runs = [r["without"] for r in rows if "without" in r]
    gen = targets[0]["gen"]
    out.update(model=server["model"], tokenizer=server["tokenizer"], load_generator=gen.label,
               vllm_version=gen.version, dynamic_k=gen.facts.get("dynamic_k"), runs=runs,
               bench_process=gen.runner.how if gen.runner else None,
               duration_s=round(time.monotonic() - started, 1), msg=f"{server['url']}: {summary(runs)} ({gen.label})")
    if baseline_runs:
        out.update(baseline_runs=baseline_runs, comparison=compare_levels(runs, baseline_runs, True, args["min_speedup"]))
        out["msg"] += "; " + "; ".join(f"c={c}: {v['says']}" for c, v in out["comparison"].items())
    out["msg"] += f"; measured in {out['duration_s']:.0f} s" + (f" (vllm bench serve: {out['bench_process']})"
                                                              if out["bench_process"] else "")
    return out


if __name__ == "__main__":
    main(ARGS, run)
