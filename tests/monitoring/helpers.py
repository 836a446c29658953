"""A fleet as the monitoring playbook registers it (settings, launch, speed record per host), and promtool."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess

import pytest

from dflash_host.speed.state import TOOL_TAG
from dfp_cli.monitoring.hosts import HostView, view_of

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None and not os.environ.get("CI"),
                                    reason="no promtool here (Debian's prometheus package; .ci/run installs it)")
COMMIT_T, COMMIT_D = "a" * 40, "b" * 40
SETTINGS = {"groups": ["gpu"], "local": False, "vllm_port": 8000, "served_model_name": "qwen", "target_revision": None,
            "drafter_revision": COMMIT_D, "min_acceptance_rate": 0.3, "min_mean_acceptance_length": None,
            "node_exporter_port": 9100, "gpu_exporter_port": 9400, "monitoring_window": "5m", "monitoring_for": "2m",
            "monitoring_scrape_interval": "15s",
            "ttft_p99_max_s": 5.0, "tpot_p99_max_s": 0.25, "prompts_share_prefixes": True,
            "prefix_cache_min_query_tokens_per_s": 100, "gpu_free_threshold_mib": None}


def cat(data: dict | None) -> dict:
    """What the playbook's `slurp` task registers for a JSON file (failed: no such file)."""
    if data is None:
        return {"failed": True, "msg": "file not found: /nowhere"}
    return {"content": base64.b64encode(json.dumps(data).encode()).decode(), "encoding": "base64", "source": "/x"}


def registered(address: str, record: dict | None, launch: dict | None = None, **settings) -> dict:
    return {"monitoring_settings": {"ansible_facts": {"monitoring_view": {**SETTINGS, "address": address, **settings}}},
            "monitoring_record": cat(record), "monitoring_launch": cat(launch)}


def launch(target: str = f"/hf/hub/models--o--t/snapshots/{COMMIT_T}") -> dict:
    return {"host": "0.0.0.0", "port": 8000, "models": {"target": {"path": target}, "drafter": {"path": "/m/d"}}}


def record(verdicts: dict[int, str], k: int = 3) -> dict:
    """A speed record whose last figures judged the drafter per concurrency (serving-bench --compare-baseline)."""
    return {"tool": TOOL_TAG, "last": {"num_speculative_tokens": k, "measured_at_utc": "2026-12-06T10:00:00Z",
                     "comparison": {str(c): {"verdict": v, "speedup": 1.0} for c, v in verdicts.items()}}}


def fleet() -> list[HostView]:
    """bad: drafter slower from concurrency 16 (tune), good: it pays everywhere; quiet: shares no prefixes."""
    return [view_of("bad", registered("10.0.0.1", record({1: "pays", 16: "slower"}), launch()), "gpu"),
            view_of("good", registered("10.0.0.2", record({1: "pays", 16: "pays"}), launch()), "gpu"),
            view_of("quiet", registered("10.0.0.3", record({1: "pays"}), launch(), prompts_share_prefixes=False), "gpu")]


def promtool(*args: str) -> subprocess.CompletedProcess:
    assert PROMTOOL, "promtool is missing: apt-get install -y prometheus (.ci/run does)"
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120)
