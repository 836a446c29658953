"""The last speed figures of a host as a Prometheus textfile (node_exporter's textfile collector).

node_exporter reads every `*.prom` file of its `--collector.textfile.directory` on each scrape, so the
file is written whole and renamed into place (a scrape never sees half a file). Names carry the
`dflash_` prefix; gauges only (each value is the last measurement, not a count).
"""

from __future__ import annotations

import math
from typing import Any

from dflash_host.host.files import atomic_write, read_bytes

HELP = {
    "dflash_acceptance_rate": "Accepted draft tokens / drafted tokens in the last measurement",
    "dflash_mean_acceptance_length": "Tokens per target step (1 + accepted / drafts) in the last measurement",
    "dflash_speedup": "Output tokens/s with the drafter / without it, per concurrency, last measurement",
    "dflash_speedup_low": "Lower end of the speed-up's 95 % interval, per concurrency, last measurement",
    "dflash_speedup_high": "Upper end of the speed-up's 95 % interval, per concurrency, last measurement",
    "dflash_output_tokens_per_second": "Output tokens/s in the last measurement, per concurrency and drafter use",
    "dflash_num_speculative_tokens": "k the server was measured with (chosen by tune when it ran)",
    "dflash_measurement_timestamp_seconds": "Unix time of the last measurement",
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def sample(name: str, labels: dict[str, Any], value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    number = float(value)
    if math.isnan(number):
        return None
    text = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels.items()))
    return f"{name}{{{text}}} {number:.6g}" if text else f"{name} {number:.6g}"


def render(figures: dict[str, Any], labels: dict[str, str]) -> str:
    """figures: acceptance_rate, mean_acceptance_length, num_speculative_tokens, measured_at (unix s),
    speedup {"<c>": x}, tokens_per_s {"<c>": {"drafter": x, "baseline": y}}."""
    found: dict[str, list[str | None]] = {}

    def family(name: str, samples: list[str | None]) -> None:
        found[name] = samples

    family("dflash_acceptance_rate", [sample("dflash_acceptance_rate", labels, figures.get("acceptance_rate"))])
    family("dflash_mean_acceptance_length",
           [sample("dflash_mean_acceptance_length", labels, figures.get("mean_acceptance_length"))])
    family("dflash_speedup", [sample("dflash_speedup", {**labels, "concurrency": c}, x)
                              for c, x in sorted((figures.get("speedup") or {}).items(), key=lambda i: int(i[0]))])
    for end in ("low", "high"):
        family(f"dflash_speedup_{end}", [sample(f"dflash_speedup_{end}", {**labels, "concurrency": c}, v.get(end))
                                         for c, v in sorted((figures.get("comparison") or {}).items(),
                                                            key=lambda i: int(i[0]))])
    family("dflash_output_tokens_per_second", [
        sample("dflash_output_tokens_per_second", {**labels, "concurrency": c, "drafter": side}, x)
        for c, pair in sorted((figures.get("tokens_per_s") or {}).items(), key=lambda i: int(i[0]))
        for side, x in sorted(pair.items())])
    family("dflash_num_speculative_tokens",
           [sample("dflash_num_speculative_tokens", labels, figures.get("num_speculative_tokens"))])
    family("dflash_measurement_timestamp_seconds",
           [sample("dflash_measurement_timestamp_seconds", labels, figures.get("measured_at"))])
    return gauges(HELP, found)


def gauges(helps: dict[str, str], found: dict[str, list[str | None]]) -> str:
    """The text of gauge families in order: HELP and TYPE, then the samples; a family with none is left out."""
    lines: list[str] = []
    for name, samples in found.items():
        kept = [s for s in samples if s]
        if kept:
            lines.extend([f"# HELP {name} {helps[name]}", f"# TYPE {name} gauge", *kept])
    return "\n".join(lines) + "\n"


def holds(path: str, text: str) -> bool:
    """Whether the file at `path` holds `text` already (a file that cannot be read does not)."""
    try:
        return read_bytes(path) == text.encode()
    except OSError:
        return False


def write_text(path: str, text: str, touch: bool = False) -> bool:
    """Write a textfile atomically when its text changed (always with `touch`, so its mtime says it is fresh);
    True when written."""
    if not touch and holds(path, text):
        return False
    atomic_write(path, text.encode(), mode=0o644)
    return True


def write(path: str, figures: dict[str, Any], labels: dict[str, str]) -> bool:
    """Write the textfile atomically; True when its content changed."""
    return write_text(path, render(figures, labels))
