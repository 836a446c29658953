"""The loads at which a host's drafter does not pay, from its own measurements.

A speed record holds a verdict per measured concurrency (serving-bench or tune: "pays", "slower",
"inconclusive"), and a tune over several levels says at which levels no k pays. Between two measured levels the
nearer one (on a log scale: loads grow by factors) is taken to speak for the load, so each level that does not
pay owns a band of running requests [low, high): the alert compares vLLM's running requests with these bands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PAYS = "pays"
NO_K_PAYS = "no_k_pays"  # tune: no k beat the baseline at this level


@dataclass(frozen=True)
class LosingBand:
    concurrency: int  # the measured level the band is named after
    verdict: str  # slower, inconclusive or no_k_pays
    low: float  # running requests, inclusive
    high: float  # exclusive; math.inf above the highest measured level


def verdicts_of(record: dict) -> dict[int, str]:
    """{concurrency: verdict} of the record's last figures; a tune's level where no k pays says so. Where the tune
    made a schedule (a k per batch size), each level is served with its own k: it pays there unless no k did."""
    out: dict[int, str] = {}
    choice: dict = record["choice"] if isinstance(record.get("choice"), dict) else {}
    for level, judged in (record.get("comparison") or {}).items():
        if isinstance(judged, dict) and judged.get("verdict") and str(level).isdigit():
            out[int(level)] = str(judged["verdict"])
    for level, chosen in (choice.get("per_level") or {}).items():
        if str(level).isdigit() and isinstance(chosen, dict):
            if chosen.get("chosen_k") is None:
                out[int(level)] = NO_K_PAYS
            elif choice.get("schedule"):
                out[int(level)] = PAYS
    return out


def _edge(a: int, b: int) -> float:
    """Where level a's band ends and b's begins: their geometric mean."""
    return round(math.sqrt(a * b), 3)


def losing_bands(verdicts: dict[int, str]) -> list[LosingBand]:
    """The bands of running requests owned by the levels whose verdict is not "pays", lowest first."""
    levels = sorted(verdicts)
    bands = []
    for i, level in enumerate(levels):
        if verdicts[level] == PAYS:
            continue
        low = 0.0 if i == 0 else _edge(levels[i - 1], level)
        high = math.inf if i == len(levels) - 1 else _edge(level, levels[i + 1])
        bands.append(LosingBand(level, verdicts[level], low, high))
    return bands
