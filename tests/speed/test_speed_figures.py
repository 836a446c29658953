"""Speed-up arithmetic, the choice of k, the Prometheus textfile and the HTML page (pure, real files)."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

from dflash_host.speed import prom_textfile
from dflash_host.speed.speedup import choose_k, gate, larger_k_cannot_pay, speedups
from dflash_host.vllm.metrics import parse_samples
from dfp_cli.speed_html import host_page, index_page


def run(c, tps, acc=None, per_pos=None):
    return {"concurrency": c, "output_tokens_per_s": tps, "acceptance_rate": acc, "per_position_acceptance": per_pos or []}


BASE = [run(1, 539.0), run(16, 6015.0)]


def test_speedups_are_ratios_per_concurrency_measured_both_ways():
    got = speedups([run(1, 1256.0), run(16, 14703.0), run(4, 100.0)], BASE)
    assert got == {"1": 2.33, "16": 2.444}


def test_choose_k_picks_the_fastest_paying_k_at_the_configured_concurrency():
    by_k = {3: [run(1, 1256.0, 1.0)], 7: [run(1, 1794.0, 1.0)], 1: [run(1, 700.0, 1.0)]}
    choice = choose_k(BASE, by_k, 1)
    assert choice["chosen_k"] == 7
    assert [row["k"] for row in choice["table"]] == [1, 3, 7]
    assert "num_speculative_tokens: 7" in choice["recommendation"]


def test_choose_k_recommends_no_drafter_when_nothing_beats_the_baseline():
    choice = choose_k(BASE, {3: [run(1, 333.0, 0.002)], 5: [run(1, 300.0, 0.001)]}, 1)
    assert choice["chosen_k"] is None
    assert "drafter_model: null" in choice["recommendation"]
    assert choice["table"][0]["speedup"] == round(333 / 539, 3)


def test_min_speedup_is_a_floor_not_just_above_one():
    assert choose_k(BASE, {3: [run(1, 600.0)]}, 1, min_speedup=1.2)["chosen_k"] is None
    assert choose_k(BASE, {3: [run(1, 700.0)]}, 1, min_speedup=1.2)["chosen_k"] == 3


def test_a_never_accepted_last_position_means_larger_k_cannot_pay():
    assert larger_k_cannot_pay([0.9, 0.4, 0.01])
    assert not larger_k_cannot_pay([1.0, 1.0, 1.0])
    assert not larger_k_cannot_pay([])
    assert not larger_k_cannot_pay([None, None, None])  # no draft was made: nothing to judge by


def test_gate_verdicts():
    slower, pays = {"speedup": 0.62, "low": 0.55, "high": 0.70}, {"speedup": 2.3, "low": 2.0, "high": 2.6}
    assert gate(slower, 1.0, "fail")[0] == "fail"
    assert gate(slower, 1.0, "warn")[0] == "warn"
    assert gate(slower, 1.0, "off")[0] == "ok"
    assert gate(pays, 1.0, "fail")[0] == "ok"
    assert "SLOWER" in gate(slower, 1.0, "warn")[1]


def test_the_gate_fails_only_on_slower_never_on_a_bare_point_or_a_straddling_interval():
    assert gate(0.62, 1.0, "fail")[0] == "warn" and "inconclusive" in gate(0.62, 1.0, "fail")[1]
    straddles = {"speedup": 0.95, "low": 0.7, "high": 1.3, "pairs": 3}
    verdict_, said = gate(straddles, 1.0, "fail")
    assert verdict_ == "warn" and "95 % interval 0.70-1.30" in said and "inconclusive" in said


def test_prometheus_textfile_is_parsable_and_written_only_when_changed(tmp_path):
    path = str(tmp_path / "dflash.prom")
    figures = {"acceptance_rate": 0.5, "mean_acceptance_length": 2.5, "num_speculative_tokens": 3,
               "measured_at": 1764550000, "speedup": {"16": 2.44, "1": 2.33},
               "tokens_per_s": {"1": {"drafter": 1256.0, "baseline": 539.0}}}
    labels = {"host": "gpu1"}
    assert prom_textfile.write(path, figures, labels) is True
    assert prom_textfile.write(path, figures, labels) is False
    text = open(path).read()
    samples = {(name, tuple(sorted(lab.items()))): v for name, lab, v in parse_samples(text)}
    assert samples[("dflash_speedup", (("concurrency", "1"), ("host", "gpu1")))] == 2.33
    assert samples[("dflash_num_speculative_tokens", (("host", "gpu1"),))] == 3
    assert 'host="a\\"b\\nc"' in prom_textfile.render(figures, {"host": 'a"b\nc'})
    assert "# TYPE dflash_acceptance_rate gauge" in text
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def test_host_page_is_self_contained_and_escapes_host_data():
    bench = {"runs": [run(1, 1256.0, 1.0, [1.0, 1.0, 1.0])], "baseline_runs": [run(1, 539.0)],
             "load_generator": "<script>alert(1)</script>", "measured_at_utc": "2026-12-01T00:00:00Z"}
    tune = {"choice": choose_k(BASE, {3: [run(1, 1256.0)], 7: [run(1, 1794.0)]}, 1),
            "by_k": {"3": [run(1, 1256.0, 1.0, [1.0, 1.0, 1.0])]}}
    page = host_page("<b>gpu1</b>", bench, tune)
    p = _Collect()
    p.feed(page)
    assert "script" not in p.tags
    assert "&lt;script&gt;" in page and "&lt;b&gt;gpu1&lt;/b&gt;" in page
    assert p.tags.count("svg") >= 3 and "link" not in p.tags and "img" not in p.tags
    for svg in page.split("<svg")[1:]:
        ET.fromstring("<svg" + svg.split("</svg>")[0] + "</svg>")  # each chart is well-formed XML
    assert "2.33x" in page


def test_index_links_each_host_page():
    page = index_page([{"host": "gpu1", "page": "gpu1.html", "speedup": 0.62, "chosen_k": None},
                       {"host": "gpu2", "page": "gpu2.html", "speedup": 2.3, "chosen_k": 7}])
    assert 'href="gpu1.html"' in page and 'class="bad">0.62x' in page and 'class="good">2.30x' in page


def test_no_baseline_means_no_choice_not_serve_without_the_drafter():
    choice = choose_k([run(16, None)], {1: [run(16, 100.0)]}, 16)
    assert choice["chosen_k"] is None and "not measured" in choice["recommendation"]
    assert "drafter_model: null" not in choice["recommendation"]


def test_host_figures_that_are_not_numbers_are_shown_escaped_and_draw_no_bar():
    tune = {"choice": {"chosen_k": "<script>x</script>", "concurrency": 16, "baseline_tokens_per_s": "fast",
                       "table": [{"k": 1, "tokens_per_s": "<b>", "speedup": None}], "recommendation": "r"}}
    page = host_page("h", None, tune)
    assert "<script>" not in page and "<b>" not in page.split("<body>")[1].replace("<b>r</b>", "")
    row = index_page([{"host": "h", "page": "h.html", "speedup": None, "chosen_k": "<script>x</script>"}])
    assert "<script>" not in row and "&lt;script&gt;" in row
