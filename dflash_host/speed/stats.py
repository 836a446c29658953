"""How sure a speed-up is: the interval that repeated measurements allow, and the verdict it supports.

Each repetition measures the server with its drafter and without it back to back (interleaved, A B A B), so a
machine that drifts slows both halves of a pair: the pair's ratio is the unit of evidence. The speed-up is the
geometric mean of the pairs' ratios and its 95 % interval Student's t on their logarithms (R - 1 degrees of
freedom: with 3 pairs a wide interval, honestly so). Runs measured one after another without pairing (tune's
variants) use Welch's interval on the two samples' logarithms instead. The verdict is never a bare point:
pays (the whole interval at or above the threshold), slower (the whole interval below it), or inconclusive.
Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# Student's t, two-sided 95 % (0.975 quantile), by degrees of freedom; 1.96 beyond the table.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}
VERDICTS = ("pays", "slower", "inconclusive")


def t975(df: float) -> float:
    """The t quantile for df degrees of freedom (the next smaller tabulated df: the interval errs wide)."""
    if df < 1:
        return math.inf
    known = [d for d in _T975 if d <= df]
    return _T975[max(known)] if df <= 30 else 1.96


def median(values: Sequence[float]) -> float | None:
    xs = sorted(float(v) for v in values if v is not None)
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def _mean_sd(xs: list[float]) -> tuple[float, float]:
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else 0.0
    return mean, math.sqrt(var)


def paired_interval(with_: Sequence[float], without: Sequence[float]) -> dict:
    """Speed-up of paired repetitions: {speedup, low, high, pairs, ratios}; low/high None for a single pair."""
    pairs = [(float(a), float(b)) for a, b in zip(with_, without) if a and b and a > 0 and b > 0]
    if not pairs:
        return {"speedup": None, "low": None, "high": None, "pairs": 0, "ratios": []}
    logs = [math.log(a / b) for a, b in pairs]
    mean, sd = _mean_sd(logs)
    out: dict = {"speedup": round(math.exp(mean), 4), "low": None, "high": None, "pairs": len(pairs),
           "ratios": [round(a / b, 4) for a, b in pairs]}
    if len(logs) > 1:
        half = t975(len(logs) - 1) * sd / math.sqrt(len(logs))
        out.update(low=round(math.exp(mean - half), 4), high=round(math.exp(mean + half), 4))
    return out


def unpaired_interval(with_: Sequence[float], without: Sequence[float]) -> dict:
    """Speed-up of two samples measured apart (Welch on the logarithms): {speedup, low, high, pairs: 0}."""
    a = [math.log(float(x)) for x in with_ if x and x > 0]
    b = [math.log(float(x)) for x in without if x and x > 0]
    if not a or not b:
        return {"speedup": None, "low": None, "high": None, "pairs": 0, "ratios": []}
    (ma, sa), (mb, sb) = _mean_sd(a), _mean_sd(b)
    out: dict = {"speedup": round(math.exp(ma - mb), 4), "low": None, "high": None, "pairs": 0, "ratios": []}
    if len(a) > 1 and len(b) > 1:
        va, vb = sa * sa / len(a), sb * sb / len(b)
        se = math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1)) if va + vb > 0 else len(a) + len(b) - 2
        half = t975(df) * se
        out.update(low=round(math.exp(ma - mb - half), 4), high=round(math.exp(ma - mb + half), 4))
    return out


def verdict(interval: dict, threshold: float = 1.0) -> str:
    """pays, slower or inconclusive (also with no interval: one repetition is a point, not a verdict)."""
    low, high = interval.get("low"), interval.get("high")
    if low is None or high is None:
        return "inconclusive"
    if low >= threshold:
        return "pays"
    if high < threshold:
        return "slower"
    return "inconclusive"


def overlaps(a: dict, b: dict) -> bool:
    """Whether two intervals share a point (a missing interval overlaps everything: it rules nothing out)."""
    if None in (a.get("low"), a.get("high"), b.get("low"), b.get("high")):
        return True
    return a["low"] <= b["high"] and b["low"] <= a["high"]


def describe(interval: dict, verdict_word: str) -> str:
    """'2.10x (95 % interval 1.80-2.40, 3 pairs): pays', as the reports say it."""
    if interval.get("speedup") is None:
        return "no speed-up measured"
    if interval.get("low") is None:
        return f"{interval['speedup']:.2f}x (one repetition, no interval): {verdict_word}"
    n = f"{interval['pairs']} pairs" if interval.get("pairs") else "unpaired"
    return f"{interval['speedup']:.2f}x (95 % interval {interval['low']:.2f}-{interval['high']:.2f}, {n}): {verdict_word}"
