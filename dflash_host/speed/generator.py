"""Which load generator sends a level's requests, and how: `vllm bench serve` where it can replay the workload,
else the built-in client (dflash_host/speed/load_client.py), saying why.

vllm bench serve replays random tokens (its random dataset) and one-turn requests through its custom dataset
(a JSONL of prompt and output_tokens, written per repetition in a private folder): the built-in workload with the
target's chat template applied (as a chat would be), a file of plain prompts with the template skipped (where
the installed vLLM has the flag). A file with messages is the built-in client's: every turn reaches the
server's chat template on /v1/chat/completions, which vllm bench serve's custom dataset cannot carry.
load_generator: auto (vllm bench serve, falling back to the built-in client when it is missing or fails),
vllm (fail instead of falling back), builtin. vllm bench serve runs through a BenchRunner that the generators of
one measurement share (dflash_host/speed/bench_process.py: vLLM imported once for every run).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from dflash_host.models.config import config_or_none
from dflash_host.module import ModuleError
from dflash_host.speed.bench_process import BenchRunner, BenchUnavailable
from dflash_host.speed.bench_result import load_from_requests, load_from_vllm_bench
from dflash_host.speed.bench_serve import bench_env, run_level, vllm_cli
from dflash_host.speed.load_client import Endpoint, closed_loop, token_prompts
from dflash_host.vllm import vllm_facts

DEFAULT_VOCAB = 32000


def vocab_size(tokenizer: str | None) -> int:
    """The target's vocab_size from its config.json (for the built-in client's token-id prompts)."""
    if tokenizer and os.path.isfile(os.path.join(tokenizer, "config.json")):
        size = (config_or_none(tokenizer) or {}).get("vocab_size")
        if isinstance(size, int) and size > 12:
            return size
    return DEFAULT_VOCAB


class LoadGenerator:
    """vllm bench serve until it cannot (auto), then the built-in client; `workload` is {name, items}. Generators
    of one measurement share `runner` (one resident vllm bench serve for both servers)."""

    def __init__(self, mode: str, venv_python: str | None, server: dict, timeout_s: float, workload: dict,
                 runner: BenchRunner | None = None) -> None:
        self.mode, self.server, self.timeout_s, self.workload = mode, server, timeout_s, workload
        self.cli, self.fallback, self.runner = None, None, runner
        self.facts: dict = {"version": None, "custom_dataset": False, "skip_template_flag": None, "dynamic_k": False}
        if mode == "builtin":
            self.fallback = "load_generator=builtin"
            return
        try:
            self.cli = vllm_cli(venv_python)
        except BenchUnavailable as exc:
            self.unavailable(str(exc))
            return
        self.facts = vllm_facts(venv_python or "", self.server.get("server_env"))
        why = self._cannot_replay()
        if why:
            self.unavailable(why)
        elif self.runner is None:
            self.runner = BenchRunner(self.cli, venv_python or "", self._bench_env(), timeout_s)

    def close(self) -> None:
        """End the resident vllm bench serve, if this generator's runner started one."""
        if self.runner is not None:
            self.runner.close()

    @property
    def version(self) -> str | None:
        return self.facts.get("version")

    def _cannot_replay(self) -> str | None:
        """Why vllm bench serve cannot send this workload as it is, or None."""
        if not self.server["tokenizer"]:
            return "no tokenizer is known (no launch record names the target): give tokenizer"
        name, items = self.workload["name"], self.workload["items"]
        if name == "random":
            return None
        if not self.facts.get("custom_dataset"):
            return f"this vLLM ({self.version or 'unknown version'}) has no custom dataset with per-request output lengths"
        if not self.facts.get("pandas"):
            return "vllm bench serve's custom dataset needs pandas, which the serving environment lacks"
        if name == "file" and any("messages" in i for i in items):
            return "the prompts file has messages: the built-in client sends every turn to /v1/chat/completions"
        if name == "file" and not self.facts.get("skip_template_flag"):
            return "this vLLM's custom dataset cannot skip the chat template, and the file's prompts are sent as written"
        return None

    def unavailable(self, reason: str) -> None:
        if self.mode == "vllm":
            raise ModuleError(f"serving_bench: vllm bench serve cannot run: {reason}; fix it or use load_generator=auto|builtin")
        if self.fallback is None:
            self.fallback = f"vllm bench serve unavailable: {reason}"
        self.cli = None

    @property
    def label(self) -> str:
        if self.cli:
            return f"vllm bench serve (vLLM {self.version or 'unknown version'})"
        return f"built-in client ({self.fallback})"

    def run(self, level: dict) -> dict:
        """One repetition's load dict, from vllm bench serve or (falling back) the built-in client."""
        if self.cli:
            try:
                load = self._vllm_bench(level)
                if load["completed"] > 0:
                    return load
                raise BenchUnavailable("vllm bench serve completed no request")
            except BenchUnavailable as exc:
                self.unavailable(f"vllm bench serve failed at concurrency {level['concurrency']}: {exc}")
        return self._builtin(level)

    def _bench_env(self) -> dict:
        env = bench_env(self.server["server_env"])
        if self.server["tokenizer"] and os.path.isdir(self.server["tokenizer"]):
            env["HF_HUB_OFFLINE"] = "1"  # a local tokenizer: never ask the hub
        return env

    def _vllm_bench(self, level: dict) -> dict:
        assert self.runner is not None  # noqa: S101 - run() calls it only with the CLI found
        key = self.server["api_key"]
        if self.workload["name"] == "random":
            return load_from_vllm_bench(run_level(self.runner, level, key), level["requests"])
        folder = tempfile.mkdtemp(prefix="dfp-speed-dataset-")
        try:
            path = os.path.join(folder, "requests.jsonl")
            with open(path, "w", encoding="utf-8") as fh:
                for item in level["items"]:
                    text = item["prompt"] if "prompt" in item else item["messages"][-1]["content"]
                    fh.write(json.dumps({"prompt": text, "output_tokens": item.get("max_tokens") or level["max_tokens"]}) + "\n")
            skip = self.facts.get("skip_template_flag") if self.workload["name"] == "file" else None
            dataset = {"kind": "custom", "path": path, "skip_template_flag": skip}
            data = run_level(self.runner, dict(level, dataset=dataset), key)
            return load_from_vllm_bench(data, level["requests"])
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _builtin(self, level: dict) -> dict:
        endpoint = Endpoint(level["url"], self.server["api_key"], self.timeout_s)
        if self.workload["name"] == "random":
            items = token_prompts(level["requests"], level["input_len"], vocab_size(self.server["tokenizer"]), level["seed"])
        else:
            items = level["items"]
        records, wall = closed_loop(endpoint, level["model"], items, level["max_tokens"], level["concurrency"],
                                    level.get("temperature", 0.0))
        load = load_from_requests(records, wall)
        if load["completed"] == 0:
            first = next((r["error"] for r in records if r.get("error")), "no answer")
            raise ModuleError(f"serving_bench: no request completed at concurrency {level['concurrency']} ({first})")
        return load
