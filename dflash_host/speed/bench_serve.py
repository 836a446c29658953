"""Run `vllm bench serve` from the serving environment: one closed-loop level, its saved JSON result.

vLLM's own load generator, the tool the field already trusts: the random dataset (no downloads; the
prompts are made with the target's tokenizer), `--max-concurrency C` with every request sent at once
(request rate inf), `--ignore-eos` with `--random-output-len T` so each request produces exactly T
tokens, greedy (`--temperature 0`), TTFT/TPOT/ITL/E2EL at the 50th and 99th percentiles, the result
saved as JSON in a private temporary folder that is read back and removed. The flags used exist from
vLLM 0.10 to 0.33 (vllm/benchmarks/serve.py and datasets.py); which of them this vLLM has (the custom dataset,
its chat-template flag) is asked of dflash_host.vllm (vllm_facts).

The API key goes through the environment (OPENAI_API_KEY, which vllm bench serve reads), never argv.
Standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from dflash_host.speed.bench_process import BenchRunner, BenchUnavailable

RESULT_NAME = "result.json"
ENV_KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "LOGNAME")


def vllm_cli(venv_python: str | None) -> str:
    """The `vllm` command beside the serving environment's python (its console script)."""
    if not venv_python:
        raise BenchUnavailable("no serving environment python (venv_python) is set")
    cli = os.path.join(os.path.dirname(venv_python), "vllm")
    if not os.access(cli, os.X_OK):
        raise BenchUnavailable(f"{cli} does not exist or is not executable")
    return cli


def _dataset_words(level: dict) -> list:
    """The dataset's flags: random token prompts (EOS ignored: exactly max_tokens each), or a custom JSONL
    (`level["dataset"]`: prompt and output_tokens a line) with the chat template applied or skipped."""
    dataset = level.get("dataset") or {"kind": "random"}
    if dataset["kind"] == "random":
        return ["--dataset-name", "random", "--random-input-len", str(level["input_len"]),
                "--random-output-len", str(level["max_tokens"]), "--ignore-eos"]
    words = ["--dataset-name", "custom", "--dataset-path", dataset["path"], "--custom-output-len", "-1"]
    if dataset.get("skip_template_flag"):
        words.append(dataset["skip_template_flag"])
    return words


def bench_argv(level: dict, result_dir: str) -> list:
    """The words after `vllm` for one level: level = {url, model, tokenizer, concurrency, requests, input_len,
    max_tokens, seed, temperature, dataset}."""
    return [
        "bench", "serve",
        "--backend", "openai",
        "--base-url", level["url"],
        "--endpoint", "/v1/completions",
        "--model", level["model"],
        "--served-model-name", level["model"],
        "--tokenizer", level["tokenizer"],
        *_dataset_words(level),
        "--num-prompts", str(level["requests"]),
        "--max-concurrency", str(level["concurrency"]),
        "--temperature", f"{float(level.get('temperature') or 0):g}",
        "--seed", str(level["seed"]),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99",
        "--disable-tqdm",
        "--save-result",
        "--result-dir", result_dir,
        "--result-filename", RESULT_NAME,
    ]


def bench_env(server_env: dict) -> dict:
    """A small environment: the basics, the server's HF_* settings (cache, offline, token) and its PYTHONPATH (a
    vLLM staged beside the python). The API key is a run's own (key_env), for it differs between servers."""
    env = {k: v for k, v in os.environ.items() if k in ENV_KEEP}
    env.update({k: v for k, v in server_env.items() if k.startswith("HF_") or k.startswith("TRANSFORMERS_")})
    if server_env.get("PYTHONPATH"):
        env["PYTHONPATH"] = server_env["PYTHONPATH"]
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def key_env(api_key: str | None) -> dict:
    """OPENAI_API_KEY for one run (vllm bench serve reads it), unset when the server has none."""
    return {"OPENAI_API_KEY": api_key or None}


def run_level(runner: BenchRunner, level: dict, api_key: str | None) -> dict:
    """Run one level and return vllm bench serve's saved result; BenchUnavailable with the reason if none."""
    folder = tempfile.mkdtemp(prefix="dfp-serving-bench-")
    try:
        runner.run(bench_argv(level, folder), key_env(api_key))
        path = os.path.join(folder, RESULT_NAME)
        if not os.path.isfile(path):
            raise BenchUnavailable("vllm bench serve exited 0 without a result")
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            raise BenchUnavailable(f"vllm bench serve's result {path} is unreadable: {exc}") from None
        if not isinstance(data, dict):
            raise BenchUnavailable("vllm bench serve's result is not a JSON object")
        return data
    finally:
        shutil.rmtree(folder, ignore_errors=True)
