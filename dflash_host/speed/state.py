"""The host's record of its last speed figures (<dfp_root>/state/speed.json) and the speed gate's cache.

serving-bench, tune and the speed gate write the last figures here (speed-up per concurrency, k,
acceptance, when, which load generator) and into the Prometheus textfile (dflash_host.speed.prom_textfile);
`invoke status` reads them back (last_speed). The gate's verdict is cached per launch fingerprint and
concurrency: a re-run of provision with nothing changed reads it instead of measuring again.
Only a file that carries the tool's tag is overwritten.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from dflash_host.host.files import atomic_write, read_bytes, read_json
from dflash_host.module import ModuleError
from dflash_host.speed import prom_textfile
from dflash_host.speed.speedup import by_concurrency, speedup_by_level

TOOL_TAG = "dflash-provision speed figures"
TEXTFILE_NAME = "dflash.prom"


def utc(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def state_file_for(root: str | None, given: str | None) -> str | None:
    """The speed record's path: `speed_state_file` when given, else <dfp_root>/state/speed.json (None: neither)."""
    if given:
        return given
    return os.path.join(os.path.expanduser(root), "state", "speed.json") if root else None


def read_state(path: str) -> dict:
    """The recorded figures ({} when there are none); a file that is not the tool's is refused, untouched."""
    if not os.path.lexists(path):
        return {}
    data = read_json(path)
    if data is None or data.get("tool") != TOOL_TAG:
        raise ModuleError(f"{path} exists but is not the tool's record of speed figures (no tag {TOOL_TAG!r}); it was "
                          "left untouched. Move it away, or set speed_state_file to a file of its own")
    return data


def write_state(path: str, data: dict) -> None:
    read_state(path)  # refuses a foreign file before it is replaced
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, (json.dumps({**data, "tool": TOOL_TAG}, indent=1, sort_keys=True) + "\n").encode(), mode=0o644)


def _at(runs: list, concurrency: int | None) -> dict:
    """The run at `concurrency`, else the first run with a drafter's figures, else the first run."""
    found = by_concurrency(runs)
    if concurrency in found:
        return found[concurrency]
    return next((r for r in runs if r.get("acceptance_rate") is not None), runs[0] if runs else {})


def figures(runs: list, baseline_runs: list, k: int | None, generator: str | None, concurrency: int | None,
            source: str, now: float | None = None, comparison: dict | None = None) -> dict:
    """The last figures of a host: what speed.json and the Prometheus textfile hold; the speed-up per level is the
    one its comparison (the interval) is centred on (speedup_by_level)."""
    now = time.time() if now is None else now
    at = _at(runs, concurrency)
    base = by_concurrency(baseline_runs)
    tps = {str(c): {"drafter": r.get("output_tokens_per_s"), **({"baseline": base[c].get("output_tokens_per_s")}
                                                                if c in base else {})}
           for c, r in sorted(by_concurrency(runs).items())}
    return {"speedup": speedup_by_level(runs, baseline_runs, comparison), "tokens_per_s": tps,
            "num_speculative_tokens": k, "acceptance_rate": at.get("acceptance_rate"),
            "mean_acceptance_length": at.get("mean_acceptance_length"),
            "per_position_acceptance": at.get("per_position_acceptance") or [], "load_generator": generator,
            "measured_at": round(now, 3), "measured_at_utc": utc(now), "source": source}


def textfile_path(folder: str) -> str:
    return os.path.join(folder, TEXTFILE_NAME)


def is_our_textfile(path: str) -> bool:
    """A textfile the tool wrote: every line a comment or a `dflash_` sample."""
    raw = read_bytes(path)
    if raw is None:
        return True
    lines = [ln for ln in raw.decode("utf-8", "replace").splitlines() if ln.strip()]
    return all(ln.startswith(("# HELP dflash_", "# TYPE dflash_", "dflash_")) for ln in lines)


def write_our_textfile(path: str, text: str, fix: str, touch: bool = False) -> bool:
    """Write a textfile of the tool's (prom_textfile.write_text: True when written); a file at `path` that is not
    the tool's, or a symlink, is refused untouched, the error ending with `fix` (where else to write)."""
    if os.path.islink(path) or not is_our_textfile(path):
        raise ModuleError(f"{path} exists but was not written by dflash-provision (lines other than dflash_ samples); "
                          f"it was left untouched. Move it away, or {fix}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return prom_textfile.write_text(path, text, touch)


def write_textfile(folder: str, figs: dict, host: str) -> tuple:
    """(path, changed) of the Prometheus textfile; a file there that is not the tool's is refused, untouched."""
    path = textfile_path(folder)
    text = prom_textfile.render(figs, {"host": host})
    return path, write_our_textfile(path, text, "set prometheus_textfile_dir to another folder")


def cached_gate(state: dict, fingerprint: str | None, concurrency: int) -> dict | None:
    """The speed gate's measurement for this launch and concurrency, if one was made."""
    entry = (state.get("gate") or {})
    if fingerprint and entry.get("fingerprint") == fingerprint and entry.get("concurrency") == concurrency:
        return entry
    return None


def last_speed(state_file: str) -> dict[str, Any]:
    """For `invoke status`: the last speed-up per concurrency, k, acceptance and when (UTC); {} when none.

    Never raises: a missing or foreign file reads as no figures."""
    try:
        state = read_state(state_file)
    except ModuleError:
        return {}
    last = state.get("last") or {}
    if not last:
        return {}
    out = {key: last.get(key) for key in ("speedup", "num_speculative_tokens", "acceptance_rate", "measured_at_utc",
                                          "load_generator", "source", "comparison")}
    out["schedule"] = (last.get("choice") or {}).get("schedule")
    return out
