"""The speed pages in a real browser (headless Chromium): no console error, every chart drawn, the speed-up's
intervals as error bars, numbers as people read them (tools/speed_pages.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from dfp_cli.speed_html import host_page

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from speed_pages import browser, check  # noqa: E402


def row(c, tps, samples, acc=None, per_pos=None):
    return {"concurrency": c, "output_tokens_per_s": tps, "samples_tokens_per_s": samples, "acceptance_rate": acc,
            "mean_acceptance_length": 1 + 3 * (acc or 0), "per_position_acceptance": per_pos or [],
            "ttft_ms_p50": 20.5, "ttft_ms_p99": 40.1, "tpot_ms_p50": 5.2, "tpot_ms_p99": 9.9}


BENCH = {
    "runs": [row(1, 13052.4, [12900.0, 13052.4, 13200.0], 0.9, [0.95, 0.9, 0.85]), row(16, 90210.0, [90000.0, 90420.0], 0.8)],
    "baseline_runs": [row(1, 6100.0, [6050.0, 6100.0, 6150.0]), row(16, 88000.0, [87000.0, 89000.0])],
    "comparison": {"1": {"speedup": 2.14, "low": 2.08, "high": 2.2, "pairs": 3, "verdict": "pays",
                         "says": "2.14x (95 % interval 2.08-2.20, 3 pairs): pays"},
                   "16": {"speedup": 1.03, "low": 0.9, "high": 1.17, "pairs": 2, "verdict": "inconclusive",
                          "says": "1.03x (95 % interval 0.90-1.17, 2 pairs): inconclusive"}},
    "interleaved": True, "load_generator": "vllm bench serve (vLLM 0.32.0)",
    "workload": {"name": "builtin", "version": "builtin-v1", "requests": 256}, "measured_at_utc": "2026-12-02T02:00:00Z",
}


@pytest.mark.skipif(browser() is None and not os.environ.get("CI"), reason="no chromium on this machine")
def test_a_host_page_draws_every_chart_with_error_bars_and_readable_numbers(tmp_path):
    html = host_page("gpu1", bench=BENCH)
    assert "13,052" in html and "e+0" not in html
    assert "pays" in html and "inconclusive" in html and "builtin-v1" in html and "in turns (A B A B)" in html
    page = tmp_path / "gpu1.html"
    page.write_text(html)
    got = check(page, tmp_path / "gpu1.png")
    assert got["ok"], got
    assert got["charts"] == 2 and got["intervals"] == 2 and got["bars"] >= 5 and not got["console_errors"]
    assert (tmp_path / "gpu1.png").stat().st_size > 1000
