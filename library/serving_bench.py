"""Measure the running vLLM server under closed-loop load: tokens/s, TTFT, TPOT and the drafter's acceptance.

A measurement: the server is never started, stopped or reconfigured (changed is always False; check
mode measures nothing). For each concurrency level C, `requests` greedy completions of `input_len`
prompt tokens and exactly `max_tokens` output tokens (ignore_eos) are sent with at most C in flight;
/metrics is read before and after (after it has settled), and the spec-decode `_total` counters'
deltas give that level's acceptance. Levels run one after the other, in the order given.

The load comes from vLLM's own `vllm bench serve` (random dataset, no downloads) run from the serving
environment (the `vllm` beside venv_python), or from the built-in client (dflash_host/speed/load_client.py)
where that cannot run. load_generator: auto (vllm bench serve, falling back per level to the built-in
client when it is missing or fails, saying why), vllm (fail instead of falling back), builtin.

The server: `url` when given, else the launch record beside `pidfile` (host, port), which also gives
the served model name, the tokenizer (the target model) and the API key (VLLM_API_KEY of the launch's
0600 environment file; it goes to the load generator through its environment or a header, never argv
or the result). `model`/`tokenizer` override those.

Result (JSON): changed False, msg (tokens/s and acceptance per level), url, model, tokenizer,
speculative (the launch's speculative config or None: null for a server without a drafter, e.g. the
baseline run), settings {input_len, max_tokens, temperature 0, ignore_eos true, concurrency [...]},
load_generator ("vllm bench serve (vLLM X)" or "built-in client (why)"), vllm_version, and runs, one per
level in the order given:
  concurrency, requests, completed, failed, duration_s, output_tokens, output_tokens_per_s,
  ttft_ms_p50, ttft_ms_p99, tpot_ms_p50, tpot_ms_p99,
  spec_decode (the server exports spec-decode counters), acceptance_rate (accepted / draft tokens),
  mean_acceptance_length (1 + accepted / drafts), per_position_acceptance (accepted at position i /
  drafts), drafts, draft_tokens, accepted_tokens, per_position_accepted (raw counts), load_generator.
Acceptance fields are None (lists empty) without a drafter. A baseline comparison is the caller's:
run this once against the server with the drafter and once without, then
dflash_host.speed.speedup.speedups(runs, baseline_runs) -> {"1": x, "16": y}.
"""

from __future__ import annotations

import os
import time

from dflash_host.host.files import read_json
from dflash_host.models.config import config_or_none
from dflash_host.module import Context, ModuleError, main
from dflash_host.speed.bench_result import load_from_requests, load_from_vllm_bench, run_row, summary
from dflash_host.speed.bench_serve import BenchUnavailable, bench_env, run_level, vllm_cli, vllm_version
from dflash_host.speed.load_client import Endpoint, closed_loop, token_prompts
from dflash_host.vllm import base_url, delta, paths, read_env, request, spec_decode_counters

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
    "timeout_s": {"type": "float", "default": 1800, "help": "limit per concurrency level, in seconds"},
}

SETTLE_S = 3.0  # the last steps' counters reach /metrics shortly after the last response
DEFAULT_VOCAB = 32000


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


def check_sizes(args: dict) -> None:
    for name in ("max_tokens", "input_len", "requests"):
        if args[name] is not None and args[name] < 1:
            raise ModuleError(f"serving_bench: {name} is {args[name]}; it must be at least 1")
    if args["timeout_s"] <= 0:
        raise ModuleError(f"serving_bench: timeout_s is {args['timeout_s']}; it must be more than 0")


def _target_path(launch: dict) -> str | None:
    target = (launch.get("models") or {}).get("target") or {}
    return target.get("path") or target.get("hub_id")


def server_from_args(args: dict) -> dict:
    """{url, model, tokenizer, api_key, server_env, speculative}: from the launch record, then the overrides."""
    launch, env = None, {}
    if args["pidfile"]:
        p = paths(args["pidfile"])
        launch = read_json(p["launch"])
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


def check_serving(server: dict, args: dict) -> None:
    """The server answers /health and serves a model; the prompt and output fit its context."""
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
    if isinstance(limit, int) and args["input_len"] + args["max_tokens"] > limit:
        raise ModuleError(
            f"serving_bench: input_len {args['input_len']} + max_tokens {args['max_tokens']} exceed the server's "
            f"max_model_len {limit}; lower them"
        )


def read_counters(url: str) -> tuple:
    """(answered, spec-decode counters or None) from /metrics."""
    res = request(url + "/metrics", timeout=10)
    if res.status != 200:
        return False, None
    return True, spec_decode_counters(res.body.decode("utf-8", "replace"))


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


def vocab_size(tokenizer: str | None) -> int:
    """The target's vocab_size from its config.json (for the built-in client's token-id prompts)."""
    if tokenizer and os.path.isfile(os.path.join(tokenizer, "config.json")):
        size = (config_or_none(tokenizer) or {}).get("vocab_size")
        if isinstance(size, int) and size > 12:
            return size
    return DEFAULT_VOCAB


class LoadGenerator:
    """Which load generator runs the next level: vllm bench serve until it cannot (auto), then the built-in client."""

    def __init__(self, mode: str, venv_python: str | None, server: dict, timeout_s: float) -> None:
        self.mode, self.server, self.timeout_s = mode, server, timeout_s
        self.cli, self.version, self.fallback = None, None, None
        if mode == "builtin":
            self.fallback = "load_generator=builtin"
            return
        try:
            self.cli = vllm_cli(venv_python)
        except BenchUnavailable as exc:
            self.unavailable(str(exc))
            return
        self.version = vllm_version(venv_python or "", self.server.get("server_env"))
        if not self.server["tokenizer"]:
            self.unavailable("no tokenizer is known (no launch record names the target): give tokenizer")

    def unavailable(self, reason: str) -> None:
        if self.mode == "vllm":
            raise ModuleError(f"serving_bench: vllm bench serve cannot run: {reason}; fix it or use load_generator=auto|builtin")
        self.cli, self.fallback = None, f"vllm bench serve unavailable: {reason}"

    @property
    def label(self) -> str:
        if self.cli:
            return f"vllm bench serve (vLLM {self.version or 'unknown version'})"
        return f"built-in client ({self.fallback})"

    def run(self, level: dict) -> dict:
        """One level's load dict, from vllm bench serve or (falling back) the built-in client."""
        if self.cli:
            try:
                data = run_level(self.cli, level, self._bench_env(), self.timeout_s)
                load = load_from_vllm_bench(data, level["requests"])
                if load["completed"] > 0:
                    return load
                raise BenchUnavailable("vllm bench serve completed no request")
            except BenchUnavailable as exc:
                self.unavailable(f"at concurrency {level['concurrency']}: {exc}")
        return self._builtin(level)

    def _bench_env(self) -> dict:
        env = bench_env(self.server["api_key"], self.server["server_env"])
        if self.server["tokenizer"] and os.path.isdir(self.server["tokenizer"]):
            env["HF_HUB_OFFLINE"] = "1"  # a local tokenizer: never ask the hub
        return env

    def _builtin(self, level: dict) -> dict:
        endpoint = Endpoint(level["url"], self.server["api_key"], self.timeout_s)
        prompts = token_prompts(level["requests"], level["input_len"], vocab_size(self.server["tokenizer"]), level["seed"])
        records, wall = closed_loop(endpoint, level["model"], prompts, level["max_tokens"], level["concurrency"])
        load = load_from_requests(records, wall)
        if load["completed"] == 0:
            first = next((r["error"] for r in records if r.get("error")), "no answer")
            raise ModuleError(f"serving_bench: no request completed at concurrency {level['concurrency']} ({first})")
        return load


def measure_level(gen: LoadGenerator, level: dict, ctx: Context) -> dict:
    """/metrics before, the load, /metrics after: one run row."""
    ok_before, before = settled_counters(level["url"])
    load = gen.run(level)
    ok_after, after = settled_counters(level["url"])
    if not (ok_before and ok_after):
        ctx.warn(f"/metrics did not answer around concurrency {level['concurrency']}: its acceptance is unknown")
    counters = delta(after, before) if ok_before and ok_after else None
    if load["failed"]:
        ctx.warn(f"{load['failed']} of {load['requests']} requests failed at concurrency {level['concurrency']}")
    return run_row(level["concurrency"], load, counters, gen.label)


def headless_node(args: dict) -> dict | None:
    """The cluster record when the configured launch is a headless node of a serving cluster (no API here:
    the cluster is measured at its head), else None."""
    if args["url"] or not args["pidfile"]:
        return None
    cluster = (read_json(paths(args["pidfile"])["launch"]) or {}).get("cluster") or {}
    return cluster if cluster.get("role") == "worker" else None


def run(args: dict, ctx: Context) -> dict:
    levels = concurrency_levels(args["concurrency"])
    check_sizes(args)
    node = headless_node(args)
    if node:
        return {"changed": False, "headless_node": True, "runs": [],
                "msg": f"headless node rank {node.get('node_rank')} of a serving cluster: no API here; the cluster is "
                f"measured at its head ({node.get('master_addr')})"}
    server = server_from_args(args)
    settings = {"input_len": args["input_len"], "max_tokens": args["max_tokens"], "temperature": 0,
                "ignore_eos": True, "concurrency": levels}
    out = {"changed": False, "url": server["url"], "speculative": server["speculative"], "settings": settings}
    if ctx.check:
        out.update(msg=f"would measure {server['url']} at concurrency {', '.join(map(str, levels))} (check mode: "
                   "nothing measured)", runs=[])
        return out
    check_serving(server, args)
    gen = LoadGenerator(args["load_generator"], args["venv_python"], server, args["timeout_s"])
    runs = []
    for c in levels:
        level = {"url": server["url"], "model": server["model"], "tokenizer": server["tokenizer"], "concurrency": c,
                 "requests": args["requests"] or max(8, 4 * c), "input_len": args["input_len"],
                 "max_tokens": args["max_tokens"], "seed": args["seed"]}
        ctx.say(f"serving_bench: concurrency {c}, {level['requests']} requests ({gen.label})")
        runs.append(measure_level(gen, level, ctx))
    out.update(model=server["model"], tokenizer=server["tokenizer"], load_generator=gen.label,
               vllm_version=gen.version, runs=runs, msg=f"{server['url']}: {summary(runs)} ({gen.label})")
    return out


if __name__ == "__main__":
    main(ARGS, run)
