"""One speed-up per measurement: what serving-bench prints (its table, JSON and page), what `invoke status` says
and what the textfile holds are the same figure, rounded once for display (the interval's centre). And the
acceptance chart draws a share on a 0-100 % scale, labelled as a share: 0.0001 is a sliver said "0.01 %", never a
full bar said "0.000". Real files: the host's record written by speed_record, read back as status reads it."""

from __future__ import annotations

import re

from dflash_host.module import Context
from dflash_host.speed.state import last_speed
from dflash_host.vllm.metrics import parse_samples
from dfp_cli import speed_commands as SC
from dfp_cli.speed_html import bar_chart, host_page, share_text
from dfp_cli.summaries import render_summary
from library import speed_record


def run_(c: int, samples: list) -> dict:
    ordered = sorted(samples)
    return {"concurrency": c, "output_tokens_per_s": ordered[len(ordered) // 2], "samples_tokens_per_s": samples,
            "acceptance_rate": 0.0001, "per_position_acceptance": [0.0001, 0.0, 0.0], "mean_acceptance_length": 1.0}


def record(tmp_path) -> dict:
    """A measurement in turns whose ratio of medians (62/100: 0.62x) and paired geometric mean (0.60x) differ."""
    args = {name: spec.get("default") for name, spec in speed_record.ARGS.items()}
    args.update(pidfile=str(tmp_path / "run" / "vllm.pid"), root=str(tmp_path), host_label="h1", action="record",
                runs=[run_(4, [50.0, 62.0, 70.0])], baseline_runs=[run_(4, [100.0, 100.0, 100.0])], interleaved=True,
                source="serving-bench", load_generator="vllm bench serve", workload={"name": "builtin"})
    return speed_record.run(args, Context())


def test_status_serving_bench_and_the_textfile_say_the_same_speed_up(tmp_path):
    out = record(tmp_path)
    figures = SC.bench_figures({"speed_record": out})
    table = SC.bench_table("h1", figures)
    shown = re.search(r"^\s+4\s+.*?(\d+\.\d\d)x", table, re.M)
    assert shown, table
    status = render_summary("status", "h1", {"running": True, "speed": last_speed(str(tmp_path / "state" / "speed.json"))})
    said = re.search(r"speed-up: (\d+\.\d\d)x at concurrency 4", status)
    assert said, status
    assert shown.group(1) == said.group(1) == "0.60", (table, status)  # the paired interval's centre, both
    assert f"{shown.group(1)}x (95 % interval" in table and f"{said.group(1)}x (95 % interval" in status
    prom = (tmp_path / "metrics" / "dflash.prom").read_text()
    [value] = [v for n, lab, v in parse_samples(prom) if n == "dflash_speedup"]
    assert value == figures["speedup"]["4"] == figures["comparison"]["4"]["speedup"]
    page = host_page("h1", bench=figures)
    assert "0.60x" in page and "0.62x" not in page


def test_a_tiny_acceptance_is_a_sliver_on_a_full_scale_said_as_a_share():
    svg = bar_chart("acceptance", [("pos 0", 0.0001), ("pos 1", 0.0)], "share", scale=1.0, figure=share_text)
    heights = [float(h) for h in re.findall(r'<rect [^>]*height="([\d.]+)"', svg)]
    assert heights[0] < 1.0 and heights[1] == 0.0, svg  # a full bar is 164 px
    assert "0.01 %" in svg and "0.000" not in svg
    page = host_page("h1", bench={"runs": [run_(1, [10.0])]})
    assert "0.01 %" in page and ">0.000<" not in page
    full = bar_chart("acceptance", [("pos 0", 1.0), ("pos 1", 0.5)], "share", scale=1.0, figure=share_text)
    tall = [float(h) for h in re.findall(r'<rect [^>]*height="([\d.]+)"', full)]
    assert abs(tall[1] * 2 - tall[0]) < 0.2 and "100.0 %" in full and "50.0 %" in full


def test_shares_read_as_people_read_them():
    assert [share_text(v) for v in (0.875, 1.0, 0.0, 0.0001, 0.000001, None)] == \
        ["87.5 %", "100.0 %", "0 %", "0.01 %", "< 0.001 %", "n/a"]
