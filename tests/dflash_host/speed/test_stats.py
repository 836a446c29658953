"""The speed verdict's statistics on known samples: intervals, the three verdicts, tune's k with overlapping
intervals, and the schedule of k per batch size (dflash_host/speed/stats.py, speedup.py)."""

from __future__ import annotations

import math

from dflash_host.speed.speedup import choose_k, schedule
from dflash_host.speed.stats import overlaps, paired_interval, t975, unpaired_interval, verdict


def test_a_paired_interval_is_students_t_on_the_log_ratios():
    got = paired_interval([200.0, 220.0, 210.0], [100.0, 100.0, 100.0])
    logs = [math.log(2.0), math.log(2.2), math.log(2.1)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = 4.303 * sd / math.sqrt(3)
    assert got["pairs"] == 3 and got["ratios"] == [2.0, 2.2, 2.1]
    assert math.isclose(got["speedup"], math.exp(mean), rel_tol=1e-3)
    assert math.isclose(got["low"], math.exp(mean - half), rel_tol=1e-3)
    assert math.isclose(got["high"], math.exp(mean + half), rel_tol=1e-3)
    assert verdict(got) == "pays"


def test_the_three_verdicts_and_a_single_pair():
    assert verdict({"low": 1.1, "high": 1.4}) == "pays"
    assert verdict({"low": 0.6, "high": 0.9}) == "slower"
    assert verdict({"low": 0.9, "high": 1.2}) == "inconclusive"
    assert verdict({"low": 1.1, "high": 1.4}, threshold=1.2) == "inconclusive"
    one = paired_interval([150.0], [100.0])
    assert one["speedup"] == 1.5 and one["low"] is None and verdict(one) == "inconclusive"


def test_the_spread_the_h200_showed_is_inconclusive_not_a_verdict():
    """1.54x then 2.78x for one configuration: two pairs that far apart cannot settle anything."""
    got = paired_interval([1540.0, 2780.0], [1000.0, 1000.0])
    assert got["low"] < 1.0 < got["high"] and verdict(got) == "inconclusive"


def test_an_unpaired_interval_uses_welch_and_the_t_table_errs_wide():
    got = unpaired_interval([300.0, 310.0, 305.0], [100.0, 102.0, 98.0])
    assert 2.9 < got["low"] < got["speedup"] < got["high"] < 3.2
    assert t975(2.5) == 4.303 and t975(100) == 1.96 and math.isinf(t975(0))
    assert overlaps({"low": 1.0, "high": 2.0}, {"low": 1.9, "high": 3.0})
    assert not overlaps({"low": 1.0, "high": 1.5}, {"low": 1.9, "high": 3.0})


def row(c, samples, acc=None):
    return {"concurrency": c, "output_tokens_per_s": sorted(samples)[len(samples) // 2], "acceptance_rate": acc,
            "samples_tokens_per_s": samples}


def test_tune_prefers_the_smaller_k_when_the_intervals_overlap():
    base = [row(1, [100.0, 101.0, 99.0])]
    by_k = {3: [row(1, [200.0, 210.0, 190.0])], 5: [row(1, [205.0, 215.0, 195.0])], 1: [row(1, [120.0, 121.0, 119.0])]}
    choice = choose_k(base, by_k, 1)
    assert choice["chosen_k"] == 3  # 5 is faster on its median, but not shown faster than 3
    far = {3: [row(1, [200.0, 201.0, 199.0])], 5: [row(1, [300.0, 301.0, 299.0])]}
    assert choose_k(base, far, 1)["chosen_k"] == 5
    slower = choose_k(base, {3: [row(1, [50.0, 51.0, 49.0])]}, 1)
    assert slower["chosen_k"] is None and slower["table"][0]["verdict"] == "slower"


def test_a_schedule_gives_each_level_a_band_and_zero_where_no_k_pays():
    assert schedule({1: 5, 16: 3}) == [[1, 4, 5], [5, 1024, 3]]
    assert schedule({1: 7, 8: 4, 64: None}, max_batch=256) == [[1, 2, 7], [3, 22, 4], [23, 256, 0]]
    assert schedule({16: 2}) == [[1, 1024, 2]]


def test_tune_compares_two_k_on_their_own_samples_not_through_the_baseline():
    """The H200's agreeing pair at concurrency 16 (tokens/s of 3 repetitions): each k's interval against the noisy
    baseline overlaps the others', yet k=1 is not shown to pay and is clearly slower than k=3 and k=7."""
    base = [row(16, [6816.6, 7037.7, 5533.3])]
    by_k = {1: [row(16, [8666.9, 8734.8, 7054.2])], 3: [row(16, [11215.5, 11465.0, 11851.2])],
            7: [row(16, [11943.2, 13323.0, 13342.6])]}
    choice = choose_k(base, by_k, 16)
    verdicts = {r["k"]: r["verdict"] for r in choice["table"]}
    assert verdicts == {1: "inconclusive", 3: "pays", 7: "pays"}
    assert choice["chosen_k"] == 3  # 7 is faster on its median, but not shown faster than 3 on their samples
    apart = {**by_k, 7: [row(16, [14000.0, 14100.0, 14050.0])]}  # shown faster than k=3: the longer draft
    assert choose_k(base, apart, 16)["chosen_k"] == 7
