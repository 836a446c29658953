"""Self-contained HTML pages of the speed figures (inline SVG, no script, no external file).

One page per host (`serving-bench --compare-baseline` and `tune` results) and an index for a group.
People read a bar chart faster than a table: tokens/s per k against the baseline, the speed-up per level with
its 95 % interval as an error bar, and the acceptance of each draft position; the verdict is said in words, with
the workload it was measured on. Numbers are written as people read them (13,052 tok/s, 2.10x, 87.5 %). Every
text that comes from a host is escaped: it is data, never markup.
"""

from __future__ import annotations

from html import escape
from typing import Any, Callable

WIDTH, HEIGHT, PAD = 640, 260, 48
STYLE = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:60em}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}th{background:#f4f4f4}"
         ".bad{color:#b00020;font-weight:bold}.good{color:#0a7d28;font-weight:bold}")


def figure_text(value: Any, fmt: str = "{:,.1f}") -> str:
    """A figure as text ("n/a" when missing); host data where a number belongs is shown as it is."""
    if value is None:
        return "n/a"
    try:
        return fmt.format(value)
    except (TypeError, ValueError):
        return str(value)


def _num(value: Any, fmt: str = "{:,.1f}") -> str:
    """A figure for the page, escaped: figures come from hosts, so they are shown, never run."""
    return escape(figure_text(value, fmt))


def readable(value: Any) -> str:
    """A bar's label: 13,052 for large figures, 2.10 for ratios, 0.875 for shares (never 1.31e+04)."""
    number = _as_float(value)
    if number is None:
        return "n/a" if value is None else str(value)
    if abs(number) >= 100:
        return f"{number:,.0f}"
    if abs(number) >= 1:
        return f"{number:,.2f}"
    if number and abs(number) < 0.001:
        return "< 0.001" if number > 0 else "> -0.001"  # never "0.000" for what is not 0
    return f"{number:.3f}"


def share_text(value: Any) -> str:
    """A share as a percentage: 87.5 %, 0.01 % for a sliver (never "0.0 %" for what is not 0), < 0.001 % below."""
    number = _as_float(value)
    if number is None:
        return readable(value)
    pct = number * 100
    if pct == 0:
        return "0 %"
    if abs(pct) >= 0.1:
        return f"{pct:.1f} %"
    if abs(pct) >= 0.001:
        return f"{pct:.3f}".rstrip("0") + " %"
    return "< 0.001 %"


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def bar_chart(title: str, bars: list, unit: str, reference: float | None = None, scale: float | None = None,
              figure: Callable[[Any], str] = readable) -> str:
    """An SVG bar chart of (label, value) or (label, value, low, high) bars: low-high draws an error bar (the 95 %
    interval). `reference` draws a dashed line (the baseline's value, or 1.0 for speed-ups). A value that is not a
    number (host data) draws no bar. `scale`: the top of a fixed scale (1.0 for shares: a share of 0.0001 is a
    sliver, where a scale fitted to the bars would draw it full height); `figure` writes each bar's value."""
    whiskers = {b[0]: (_as_float(b[2]), _as_float(b[3])) for b in bars if len(b) == 4}
    bars = [(b[0], _as_float(b[1])) for b in bars]
    reference = _as_float(reference)
    values = [v for _, v in bars if v is not None] + ([reference] if reference else [])
    highs = [h for _, h in whiskers.values() if h is not None]
    # the scale is the bars': an interval reaching far above them is cut at the top (an open end, its value said)
    top = max(values + [min(h, 1.8 * max(values, default=1.0)) for h in highs], default=1.0) * 1.1 or 1.0
    if scale:
        top = float(scale)
    slot = (WIDTH - 2 * PAD) / max(len(bars), 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" role="img" '
             f'aria-label="{escape(title)}"><title>{escape(title)}</title>',
             f'<text x="{PAD}" y="18" font-size="14">{escape(title)} ({escape(unit)})</text>',
             f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" stroke="#333"/>']
    for i, (label, value) in enumerate(bars):
        x = PAD + i * slot + slot * 0.15
        h = 0 if value is None else (HEIGHT - 2 * PAD) * max(min(value, top), 0.0) / top
        parts.append(f'<rect x="{x:.1f}" y="{HEIGHT - PAD - h:.1f}" width="{slot * 0.7:.1f}" height="{h:.1f}" '
                     f'fill="{"#999" if label == "baseline" else "#3b6fb6"}"/>')
        parts.append(f'<text x="{x + slot * 0.35:.1f}" y="{HEIGHT - PAD + 16}" font-size="12" '
                     f'text-anchor="middle">{escape(label)}</text>')
        low, high = whiskers.get(label, (None, None))
        if value is not None and low is not None and high is not None:
            y_low = HEIGHT - PAD - (HEIGHT - 2 * PAD) * min(low, top) / top
            y_high = HEIGHT - PAD - (HEIGHT - 2 * PAD) * min(high, top) / top
            mid = x + slot * 0.35
            cap = f"M{mid - 6:.1f} {y_high:.1f}h12" if high <= top else ""  # no cap: the interval goes on
            parts.append(f'<path d="M{mid:.1f} {y_low:.1f}V{y_high:.1f}M{mid - 6:.1f} {y_low:.1f}h12{cap}" '
                         'stroke="#111" stroke-width="1.5" fill="none" class="interval"/>')
            parts.append(f'<text x="{mid + 9:.1f}" y="{y_high + 10:.1f}" font-size="10">{escape(readable(low))}-'
                         f'{escape(readable(high))}</text>')
        parts.append(f'<text x="{x + slot * 0.35:.1f}" y="{HEIGHT - PAD - h - 4:.1f}" font-size="11" '
                     f'text-anchor="middle">{escape(figure(value))}</text>')
    if reference:
        y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * reference / top
        parts.append(f'<line x1="{PAD}" y1="{y:.1f}" x2="{WIDTH - PAD}" y2="{y:.1f}" stroke="#b00020" '
                     'stroke-dasharray="6 4"/>')
    return "".join(parts) + "</svg>"


def _runs_table(runs: list[dict], baseline: dict[int, dict], comparison: dict | None = None) -> str:
    head = ("<tr><th>concurrency</th><th>tokens/s</th><th>without drafter</th><th>speed-up</th><th>TTFT p50/p99 ms"
            "</th><th>TPOT p50/p99 ms</th><th>acceptance</th><th>mean acceptance length</th></tr>")
    rows = []
    for r in runs:
        c = int(r["concurrency"])
        base = baseline.get(c, {}).get("output_tokens_per_s")
        tps = r.get("output_tokens_per_s")
        measured = (comparison or {}).get(str(c)) or {}
        ratio = measured.get("speedup") or (tps / base if tps and base else None)
        word = measured.get("verdict")
        if word is not None:
            cls = ' class="good"' if word == "pays" else ' class="bad"' if word == "slower" else ""
        else:
            cls = "" if ratio is None else (' class="good"' if ratio >= 1 else ' class="bad"')
        rows.append(f"<tr><td>{c}</td><td>{_num(tps)}</td><td>{_num(base)}</td><td{cls}>{_num(ratio, '{:.2f}x')}</td>"
                    f"<td>{_num(r.get('ttft_ms_p50'))} / {_num(r.get('ttft_ms_p99'))}</td>"
                    f"<td>{_num(r.get('tpot_ms_p50'), '{:.2f}')} / {_num(r.get('tpot_ms_p99'), '{:.2f}')}</td>"
                    f"<td>{_num(r.get('acceptance_rate'), '{:.1%}')}</td>"
                    f"<td>{_num(r.get('mean_acceptance_length'), '{:.2f}')}</td></tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def host_page(host: str, bench: dict | None = None, tune: dict | None = None) -> str:
    """One host's page: the with/without table and charts from serving-bench and/or tune."""
    body = [f"<h1>{escape(host)}: is the drafter a speed-up?</h1>"]
    if tune:
        choice = tune.get("choice") or {}
        c = choice.get("concurrency")
        body.append(f"<p><b>{escape(str(choice.get('recommendation', '')))}</b></p>")
        if choice.get("schedule"):
            bands = ", ".join(f"batch {a}-{b}: k={k}" for a, b, k in choice["schedule"])
            body.append(f"<p>k per batch size (num_speculative_tokens_per_batch_size): {escape(bands)}</p>")
        elif choice.get("schedule_note"):
            body.append(f"<p>{escape(str(choice['schedule_note']))}</p>")
        body.append("<ul>" + "".join(f"<li>k={escape(str(row['k']))}: {escape(str(row.get('says', '')))}</li>"
                                     for row in choice.get("table", [])) + "</ul>")
        bars = [("baseline", choice.get("baseline_tokens_per_s"))]
        bars += [(f"k={row['k']}", row.get("tokens_per_s")) for row in choice.get("table", [])]
        body.append(bar_chart(f"tokens/s at concurrency {c}", bars, "output tokens/s", choice.get("baseline_tokens_per_s")))
        for k, runs in sorted((tune.get("by_k") or {}).items(), key=lambda i: int(i[0])):
            body.append(_acceptance_chart(f"k={k}", runs))
    if bench:
        baseline = {int(r["concurrency"]): r for r in bench.get("baseline_runs") or []}
        body.append(f"<h2>Serving benchmark ({escape(str(bench.get('load_generator', '')))})</h2>")
        body.append(f"<p>workload: {escape(workload_words(bench.get('workload')))}"
                    f"{'; with and without the drafter in turns (A B A B)' if bench.get('interleaved') else ''}</p>")
        body.append(_verdicts(bench.get("comparison") or {}))
        body.append(_prefix_cache(bench.get("prefix_cache") or {}))
        body.append(_runs_table(bench.get("runs") or [], baseline, bench.get("comparison")))
        for run in bench.get("runs") or []:
            body.append(_acceptance_chart(f"concurrency {run.get('concurrency')}", [run]))
    measured = (bench or tune or {}).get("measured_at_utc", "")
    body.append(f"<p>measured {escape(str(measured))}</p>")
    return _page(f"{host}: drafter speed-up", body)


def workload_words(workload: dict | None) -> str:
    w = workload or {}
    if w.get("name") == "file":
        return f"{w.get('file')} (sha256 {str(w.get('sha256'))[:12]}, {w.get('requests')} requests)"
    if w.get("name") == "builtin":
        return f"the built-in mixed workload {w.get('version')} ({w.get('requests')} requests)"
    return "random tokens" if w else "not recorded"


def _prefix_cache(compared: dict) -> str:
    """The prefix-cache hit rate with and without the drafter per level, in words (dflash_host/speed/prefix_cache.py)."""
    levels = sorted(compared.items(), key=lambda kv: int(kv[0]))
    return "".join(f'<p class="{"bad" if v.get("verdict") == "lost" else ""}">prefix cache: {escape(str(v.get("says", "")))}</p>'
                   for _c, v in levels)


def _verdicts(comparison: dict) -> str:
    """The verdict per level in words, and the speed-ups with their intervals as error bars."""
    if not comparison:
        return ""
    levels = sorted(comparison.items(), key=lambda kv: int(kv[0]))
    words = "".join(f'<li class="{"good" if v.get("verdict") == "pays" else "bad" if v.get("verdict") == "slower" else ""}">'
                    f"concurrency {escape(str(c))}: {escape(str(v.get('says', '')))}</li>" for c, v in levels)
    bars = [(f"c={c}", v.get("speedup"), v.get("low"), v.get("high")) for c, v in levels]
    return f"<ul>{words}</ul>" + bar_chart("speed-up with its 95 % interval", bars, "x the tokens/s without the drafter", 1.0)


def _acceptance_chart(label: str, runs: list[dict]) -> str:
    run = runs[0] if runs else {}
    rates = run.get("per_position_acceptance") or []
    if not rates:
        return ""
    bars: list[tuple[str, float | None]] = [(f"pos {i}", float(r)) for i, r in enumerate(rates)]
    return bar_chart(f"acceptance per draft position, {label}", bars, "share of drafts accepted", scale=1.0,
                     figure=share_text)


def index_page(rows: list[dict]) -> str:
    """A group's index: rows of {host, page, speedup, chosen_k, acceptance_rate, measured_at_utc}."""
    lines = ["<tr><th>host</th><th>speed-up</th><th>k</th><th>acceptance</th><th>measured</th></tr>"]
    for row in rows:
        sp = row.get("speedup")
        cls = "" if sp is None else (' class="good"' if sp >= 1 else ' class="bad"')
        lines.append(f'<tr><td><a href="{escape(row["page"])}">{escape(row["host"])}</a></td>'
                     f"<td{cls}>{_num(sp, '{:.2f}x')}</td><td>{_num(row.get('chosen_k'), '{}')}</td>"
                     f"<td>{_num(row.get('acceptance_rate'), '{:.1%}')}</td>"
                     f"<td>{escape(str(row.get('measured_at_utc', '')))}</td></tr>")
    return _page("drafter speed-up per host", ["<h1>Drafter speed-up per host</h1>", f"<table>{''.join(lines)}</table>"])


def _page(title: str, body: list[str]) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n")
