"""`invoke serving-bench` and `invoke tune`: is the drafter a speed-up, and with which k?

serving-bench runs playbooks/serving-bench.yaml once; tune runs playbooks/tune.yaml once per step (the
baseline, then each k in ascending order, hosts in parallel, each host skipping the k its drafter cannot
draft or that cannot pay), then once more to restore the configured server and choose. What the hosts
return is data: it is read from the registered results, never passed back to a host as a template.
The choice goes where the next provision reads it: host_vars/<host>.yaml beside the inventory.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path
from typing import Any

from invoke import Exit

from dflash_host.speed.speedup import by_concurrency, larger_k_cannot_pay, speedup_by_level
from dflash_host.speed.workload import WorkloadError, parse_prompts
from dfp_cli.commands import DEFAULT_INVENTORY, fail_user
from dfp_cli.options import PLAYBOOK_OPTIONS, Option, inventories_of, limit_of, parse_extra_vars, use_vault_password_file
from dfp_cli.speed_html import figure_text, workload_words
from engine.errors import UserError

DEFAULT_K = "1,2,3,5,7"
DEFAULT_HTML_DIR = "~/.cache/dflash-provision/speed"  # as shown; default_html_dir() honours XDG_CACHE_HOME
_SHARED = ("host", "group", "limit", "inventory", "extra_vars", "vault_password_file", "lock_wait")
_MEASURE = (
    Option("concurrency", None, "closed-loop concurrency levels, e.g. 1,16 (serving-bench default 1,16; tune: "
           "tune_concurrency, default 16)"),
    Option("requests", None, "requests per level (default 4 x the concurrency, at least 8)"),
    Option("max_tokens", None, "output tokens per request (default 256)"),
    Option("prompts", None, "the operator's requests, JSONL (one {\"prompt\": ...} or {\"messages\": [...]} a line); "
           "default: the built-in mixed workload"),
    Option("repetitions", None, "measured repetitions per level, after a warm-up (default 3)"),
    Option("json", None, "write the figures as JSON to this file ('-': print them)"),
    Option("html", None, f"folder for the HTML pages (default {DEFAULT_HTML_DIR}/, the tool's own folder: never the "
           "working folder)"),
)
SERVING_BENCH_OPTIONS = (*(o for o in PLAYBOOK_OPTIONS if o.name in _SHARED), *_MEASURE,
                         Option("compare_baseline", False, "also measure the same launch without the drafter"),
                         Option("repeat", None, "run the whole measurement this many times and say how far apart they are"))
TUNE_OPTIONS = (*(o for o in PLAYBOOK_OPTIONS if o.name in _SHARED), *_MEASURE,
                Option("k", DEFAULT_K, f"num_speculative_tokens to try (default {DEFAULT_K}; at most block_size - 1)"),
                Option("write", True, "write the chosen k to host_vars/<host>.yaml (--no-write: only report)"))


def _levels(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        levels = [int(w) for w in str(text).replace(" ", "").split(",") if w]
    except ValueError:
        raise UserError(f"--concurrency/--k is {text!r}; give whole numbers separated by commas, e.g. 1,16") from None
    if not levels or min(levels) < 1:
        raise UserError(f"--concurrency/--k is {text!r}; every value must be a whole number of at least 1")
    return levels


def checked_prompts(path_text: str) -> str:
    """The prompts file's absolute path once every line is a request (before any host is touched)."""
    path = Path(path_text).expanduser()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UserError(f"--prompts {path_text}: cannot read it ({exc.strerror}); give a JSONL file of requests") from None
    try:
        parse_prompts(raw, str(path_text))
    except WorkloadError as exc:
        raise UserError(f"--prompts: {exc}") from None
    return str(path.resolve())


def measure_vars(opts: dict) -> dict:
    """The extra variables of the measurement: -e first, then the command's own flags."""
    out = parse_extra_vars(opts.get("extra_vars"))
    if opts.get("concurrency"):
        out["speed_concurrency"] = _levels(opts["concurrency"])
    if opts.get("prompts"):
        out["speed_prompts"] = checked_prompts(opts["prompts"])
    for flag, var in (("requests", "speed_requests"), ("max_tokens", "speed_max_tokens"),
                      ("repetitions", "speed_repetitions")):
        if opts.get(flag) is not None:
            try:
                out[var] = int(opts[flag])
            except ValueError:
                raise UserError(f"--{flag.replace('_', '-')} is {opts[flag]!r}; give a whole number") from None
    return out


def _play(playbook: str, opts: dict, extra_vars: dict, limit: str | None = None) -> Any:
    from engine.api import run_playbook  # here: `invoke --list` stays fast

    use_vault_password_file(opts.get("vault_password_file"))
    result = run_playbook(playbook, inventories_of(opts.get("inventory"), DEFAULT_INVENTORY),
                          limit=limit or limit_of(opts.get("host"), opts.get("group"), opts.get("limit")),
                          extra_vars=extra_vars, quiet=False, lock_wait=float(opts.get("lock_wait") or 60))
    if result.error:
        raise UserError(result.error)
    return result


# --------------------------------------------------------------------------- serving-bench


def bench_figures(registered: dict) -> dict:
    """One host's figures: runs, baseline_runs, speedup, comparison (interval and verdict per level), the load
    generator and the workload, from what the host recorded (speed_record)."""
    record = registered.get("speed_record") or {}
    figures = record.get("figures") or {}
    runs = record.get("runs") or []
    base_runs = record.get("baseline_runs") or []
    comparison = figures.get("comparison") or {}
    # the figure the host recorded (status and the textfile show it): one speed-up per level, everywhere
    speedup = figures.get("speedup") or (speedup_by_level(runs, base_runs, comparison) if base_runs else {})
    return {"runs": runs, "baseline_runs": base_runs, "speedup": speedup,
            "comparison": comparison, "interleaved": figures.get("interleaved"),
            "prefix_cache": figures.get("prefix_cache") or {},
            "load_generator": figures.get("load_generator"), "workload": figures.get("workload")}


def by_host_or_one(per_host: dict, opts: dict) -> dict:
    """--host H: the host's object itself; a group: keyed by host."""
    if opts.get("host") and len(per_host) == 1 and not opts.get("group") and not opts.get("limit"):
        return next(iter(per_host.values()))
    return per_host


def serving_bench_run(opts: dict) -> tuple[int, dict, dict]:
    """(exit code, figures per host, registered per host): the playbook run and its figures."""
    extra = {**measure_vars(opts), "speed_compare_baseline": bool(opts.get("compare_baseline"))}
    result = _play("serving-bench", opts, extra)
    per_host = {h: bench_figures(reg) for h, reg in result.registered.items() if (reg.get("speed_record") or {}).get("runs")}
    return result.exit_code, per_host, result.registered


def _downtime_line(host: str, registered: dict) -> str | None:
    stop = registered.get("baseline_stop") or {}
    restored = stop.get("restored")
    if restored:
        return f"{host}: the configured server was stopped for the baseline and is back: {restored.get('msg')}"
    server = registered.get("speed_baseline_server") or {}
    if server.get("placement") == "beside":
        return f"{host}: baseline measured on a second server beside the configured one (PID {server.get('configured_pid')} untouched)"
    return None


def repeats_of(opts: dict) -> int:
    try:
        n = int(opts.get("repeat") or 1)
    except ValueError:
        n = 0
    if n < 1:
        raise UserError(f"--repeat is {opts.get('repeat')!r}; give a whole number of at least 1 (2: measure twice)")
    return n


def spread_lines(rounds: list[dict]) -> list[str]:
    """How far apart the verdicts of repeated measurements are, per host and level: each round's speed-up and
    verdict, the largest ratio between two of them, and whether their intervals overlap."""
    lines = []
    for host in sorted({h for r in rounds for h in r}):
        levels = sorted({int(c) for r in rounds for c in (r.get(host, {}).get("comparison") or {})})
        for c in levels:
            got = [(r.get(host, {}).get("comparison") or {}).get(str(c)) or {} for r in rounds]
            points = [g["speedup"] for g in got if g.get("speedup")]
            if len(points) < 2:
                continue
            apart = max(points) / min(points)
            lows = [float(g["low"]) for g in got if g.get("low") is not None]
            highs = [float(g["high"]) for g in got if g.get("high") is not None]
            overlap = len(lows) == len(got) == len(highs) and max(lows) <= min(highs)
            said = " | ".join(f"{g.get('says')}" for g in got)
            lines.append(f"{host} concurrency {c}: {said}; apart by {apart:.2f}x; intervals "
                         f"{'overlap' if overlap else 'do NOT overlap (the measurement is noisier than its intervals say)'}")
    return lines


def serving_bench(c: Any = None, **opts: Any) -> None:
    """The command body of `invoke serving-bench`."""
    rounds = []
    try:
        for _ in range(repeats_of(opts)):
            code, per_host, registered = serving_bench_run(opts)
            rounds.append(per_host)
            for host, figures in per_host.items():
                print(bench_table(host, figures))
                line = _downtime_line(host, registered.get(host, {}))
                if line:
                    print(line)
            if code:
                break
    except UserError as exc:
        raise fail_user(exc) from None
    for line in spread_lines(rounds):
        print(line)
    if len(rounds) > 1:
        per_host = {h: dict(f, repeats=[r.get(h) for r in rounds], spread=[ln for ln in spread_lines(rounds)
                                                                        if ln.startswith(f"{h} ")]) for h, f in per_host.items()}
    write_json(opts.get("json"), by_host_or_one(per_host, opts))
    if opts.get("compare_baseline") and per_host:
        pages = write_html(html_dir(opts), {h: {"bench": _with_time(f, registered.get(h, {}))} for h, f in per_host.items()})
        print(f"HTML: {', '.join(pages)}")
    if code:
        raise Exit(code=code)


def _with_time(figures: dict, registered: dict) -> dict:
    measured = ((registered.get("speed_record") or {}).get("figures") or {}).get("measured_at_utc")
    return {**figures, "measured_at_utc": measured}


def bench_table(host: str, figures: dict) -> str:
    base = by_concurrency(figures.get("baseline_runs") or [])
    turns = "" if not base else "; in turns (A B A B)" if figures.get("interleaved") else "; one after the other"
    lines = [f"{host} ({figures.get('load_generator')}; {workload_words(figures.get('workload'))}{turns}):",
             "  concurrency  tok/s  without drafter  speed-up  acceptance  mean acc. length"]
    for run in figures.get("runs") or []:
        c = int(run["concurrency"])
        b = base.get(c, {}).get("output_tokens_per_s")
        # the interval's centre (geometric mean of the paired repetitions) where one was measured, else the ratio
        sp = ((figures.get("comparison") or {}).get(str(c)) or {}).get("speedup") or (figures.get("speedup") or {}).get(str(c))
        lines.append(f"  {c:>11}  {figure_text(run.get('output_tokens_per_s'))}  {figure_text(b):>15}  {figure_text(sp, '{:.2f}x'):>8}  "
                     f"{figure_text(run.get('acceptance_rate'), '{:.1%}'):>10}  {figure_text(run.get('mean_acceptance_length'), '{:.2f}'):>16}")
    for c, verdict in sorted((figures.get("comparison") or {}).items(), key=lambda kv: int(kv[0])):
        lines.append(f"  concurrency {c}: {verdict.get('says')}")
    for _c, seen in sorted((figures.get("prefix_cache") or {}).items(), key=lambda kv: int(kv[0])):
        lines.append(f"  prefix cache: {seen.get('says')}")  # dflash_host/speed/prefix_cache.py
    return "\n".join(lines)




# --------------------------------------------------------------------------- output files


def default_html_dir() -> str:
    """Where the pages go when --html is not given: the tool's own folder on the control node (beside its other
    files, `~/.cache/dflash-provision`), never the folder the command was run from (a checkout would show them
    as untracked files)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "dflash-provision", "speed")


def html_dir(opts: dict) -> str:
    """The folder the user gave with --html (a `~` in it is theirs), else default_html_dir()."""
    given = opts.get("html")
    return os.path.expanduser(str(given)) if given else default_html_dir()


def write_json(target: str | None, data: dict) -> None:
    if not target:
        return
    text = json.dumps(data, indent=2, sort_keys=True, default=str)
    if target == "-":
        print(text)
        return
    Path(target).write_text(text + "\n", encoding="utf-8")
    print(f"JSON: {target}")


def page_name(host: str) -> str:
    """A file name for a host's page (inventory names may hold characters a file name should not)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", host).lstrip(".") + ".html"


def write_html(folder: str, pages: dict) -> list[str]:
    """One page per host ({host: {bench, tune}}) and, for more than one host, an index; the paths written."""
    from dfp_cli.speed_html import host_page, index_page

    os.makedirs(folder, exist_ok=True)
    written, rows = [], []
    for host, parts in sorted(pages.items()):
        path = os.path.join(folder, page_name(host))
        Path(path).write_text(host_page(host, bench=parts.get("bench"), tune=parts.get("tune")), encoding="utf-8")
        written.append(path)
        rows.append(_index_row(host, parts))
    if len(pages) > 1:
        path = os.path.join(folder, "index.html")
        Path(path).write_text(index_page(rows), encoding="utf-8")
        written.append(path)
    return written


def _index_row(host: str, parts: dict) -> dict:
    tune, bench = parts.get("tune") or {}, parts.get("bench") or {}
    choice = tune.get("choice") or {}
    row_k: dict = next((r for r in choice.get("table", []) if r["k"] == choice.get("chosen_k")), {})
    speedup = row_k.get("speedup") if tune else min((x for x in (bench.get("speedup") or {}).values() if x), default=None)
    first = (bench.get("runs") or [{}])[0]
    return {"host": host, "page": page_name(host), "speedup": speedup, "chosen_k": choice.get("chosen_k"),
            "acceptance_rate": row_k.get("acceptance_rate") if tune else first.get("acceptance_rate"),
            "measured_at_utc": (tune or bench).get("measured_at_utc", "")}


# --------------------------------------------------------------------------- tune


class TunePlan:
    """Which variant each host measures next: the baseline, then its k in ascending order, each host skipping
    the k above its drafter's block_size - 1 and, once a measured k's last draft position is (nearly) never
    accepted, every larger k (dflash_host.speed.speedup.larger_k_cannot_pay)."""

    def __init__(self, ks: list[int]) -> None:
        self.ks = sorted(set(ks))
        self.queue: dict[str, list[int]] = {}
        self.skipped: dict[str, list[str]] = {}
        self.failed: dict[str, str] = {}
        self.measured: dict[str, list] = {}

    def after_baseline(self, host: str, registered: dict) -> None:
        server = registered.get("tune_server") or {}
        max_k = server.get("max_k")
        self.queue[host] = [k for k in self.ks if max_k is None or k <= max_k]
        over = [k for k in self.ks if max_k is not None and k > max_k]
        if over:
            self.skipped.setdefault(host, []).append(f"k={','.join(map(str, over))}: above block_size - 1 = {max_k}")
        self.measured[host] = ["baseline"]

    def after_k(self, host: str, k: int, registered: dict, concurrency: int | None) -> None:
        self.measured[host].append(k)
        runs = (registered.get("tune_bench") or {}).get("runs") or []
        run = by_concurrency(runs).get(concurrency) if concurrency else None
        per_position = (run or (runs[0] if runs else {})).get("per_position_acceptance") or []
        if self.queue.get(host) and larger_k_cannot_pay(per_position):
            rest = self.queue.pop(host)
            self.skipped.setdefault(host, []).append(
                f"k={','.join(map(str, rest))}: cannot pay (k={k}'s last draft position accepted "
                f"{float(per_position[-1]):.1%} of drafts)")

    def next_step(self) -> dict:
        return {h: q.pop(0) for h, q in self.queue.items() if q and h not in self.failed}


def _failed_hosts(result: Any) -> dict:
    return {r.host: r.msg for r in result.results if r.status in ("failed", "unreachable") and not r.ignored}


def tune_vars(opts: dict) -> dict:
    """The measurement's variables for tune: --concurrency gives the levels each k is measured at (tune_levels);
    the single k is chosen at tune_concurrency (-e), else at the largest level; several levels make a schedule
    where the host's vLLM takes a k per batch size."""
    out = measure_vars(opts)
    levels = out.pop("speed_concurrency", None)
    if levels:
        out["tune_levels"] = sorted(set(levels))
        if out.get("tune_concurrency") not in out["tune_levels"]:
            out["tune_concurrency"] = out["tune_levels"][-1]
    return out


def tune_run(opts: dict) -> tuple[int, dict]:
    """Every step of a tune; (exit code, per host {choice, by_k, baseline_runs, skipped, restore, ...})."""
    ks = _levels(opts.get("k") or DEFAULT_K) or []
    base = tune_vars(opts)
    plan = TunePlan(ks)
    first = _play("tune", opts, {**base, "tune_plan": {"*": "baseline"}})
    hosts = list(first.recap)
    plan.failed.update(_failed_hosts(first))
    for host in hosts:
        if host not in plan.failed:
            plan.after_baseline(host, first.registered.get(host, {}))
    concurrency = {h: (first.registered.get(h, {}).get("tune_settings") or {}).get("concurrency") for h in hosts}
    step = plan.next_step()
    while step:
        res = _play("tune", opts, {**base, "tune_plan": step}, limit=",".join(step))
        plan.failed.update(_failed_hosts(res))
        for host, k in step.items():
            if host not in plan.failed:
                plan.after_k(host, k, res.registered.get(host, {}), concurrency.get(host))
        step = plan.next_step()
    last = _play("tune", opts, {**base, "tune_phase": "choose"}, limit=",".join(hosts) or None)
    failed = {**plan.failed, **_failed_hosts(last)}
    out = {}
    for host in hosts:
        reg = last.registered.get(host, {})
        choice = reg.get("tune_choice") or {}
        out[host] = {"choice": choice.get("choice"), "by_k": choice.get("by_k") or {},
                     "baseline_runs": choice.get("baseline_runs") or [], "measured": plan.measured.get(host, []),
                     "skipped": plan.skipped.get(host, []), "failed": failed.get(host),
                     "restored": (reg.get("tune_restore") or {}).get("restored"),
                     "measured_at_utc": (choice.get("figures") or {}).get("measured_at_utc")}
    return (2 if failed else max(first.exit_code, last.exit_code)), out


def tune_table(host: str, tuned: dict) -> str:
    """The tune's table, as printed and reported: tokens/s and speed-up per k against the baseline."""
    choice = tuned.get("choice") or {}
    c = choice.get("concurrency")
    lines = [f"{host}: tune at concurrency {c} (baseline {figure_text(choice.get('baseline_tokens_per_s'))} tok/s)",
             "  | k | tok/s | vs no drafter | acceptance |", "  |---|---|---|---|"]
    for row in choice.get("table", []):
        mark = " <- chosen" if row["k"] == choice.get("chosen_k") else ""
        lines.append(f"  | {row['k']} | {figure_text(row.get('tokens_per_s'))} | {figure_text(row.get('speedup'), '{:.2f}x')} | "
                     f"{figure_text(row.get('acceptance_rate'), '{:.1%}')} |{mark}")
    lines += [f"  skipped {s}" for s in tuned.get("skipped", [])]
    return "\n".join(lines)


# --------------------------------------------------------------------------- host_vars


VAULT_HEADER = "$ANSIBLE_VAULT"


def host_vars_file(inventory: str, host: str) -> Path:
    """host_vars/<host>.yaml beside the inventory (the last -i: later sources win); in a host_vars/<host>/ folder,
    a file of its own there that sorts last."""
    base = Path(inventory)
    folder = (base if base.is_dir() else base.parent) / "host_vars"
    if (folder / host).is_dir():
        return folder / host / "zz-dflash-tune.yaml"
    for suffix in (".yml", ".json", ""):
        if (folder / f"{host}{suffix}").is_file():
            return folder / f"{host}{suffix}"
    return folder / f"{host}.yaml"


def _refuse_to_rewrite(path: Path, old: str, key: str, value: Any) -> None:
    """Only a plain YAML file whose `key` holds a one-line value is rewritten; anything else is the user's to edit."""
    by_hand = f"Set {key}: {value} there by hand"
    if path.is_symlink():
        raise UserError(f"{path} is a symlink; the tool does not write through it. {by_hand}")
    if old.startswith(VAULT_HEADER) or path.suffix == ".json" or "!vault" in old:
        raise UserError(f"{path} is vault-encrypted, holds !vault values or is JSON; the tool does not rewrite it. {by_hand}")
    if re.search(r"^\.\.\.\s*$", old, re.MULTILINE):
        raise UserError(f"{path} ends its YAML document with '...'; the tool does not rewrite it. {by_hand}")
    if re.search(rf"^{re.escape(key)}\s*:[^\n]*\n[ \t]+\S", old, re.MULTILINE) or re.search(
            rf"^{re.escape(key)}\s*:\s*(\||>|$)", old, re.MULTILINE):
        raise UserError(f"{path}: {key} spans several lines there; the tool does not rewrite it. {by_hand}")


def _check_round_trip(path: Path, old: str, new: str, key: str, value: Any) -> None:
    """The edited text must load to the file's data plus the one change (a flow mapping, an anchor or alias on
    the line, a tag would not): else nothing is written and the user edits the file."""
    import yaml

    def load(text: str) -> Any:
        return yaml.safe_load(text) if text.strip() else {}

    by_hand = f"Set {key}: {value} there by hand"
    try:
        before = load(old)
    except yaml.YAMLError:
        raise UserError(f"{path} is not valid YAML; the tool does not rewrite it. {by_hand}") from None
    if not isinstance(before, dict):
        raise UserError(f"{path} does not hold a mapping of variables; the tool does not rewrite it. {by_hand}")
    try:
        after = load(new)
    except yaml.YAMLError:
        after = None
    if after != {**before, key: value}:
        raise UserError(f"{path}: its layout (a flow mapping, an anchor or alias, a tag on {key}) would not survive a "
                        f"line edit, so the tool does not rewrite it; nothing was written. {by_hand}")


def _replace_file(path: Path, text: str) -> None:
    """Write through a temp file made anew (never through a planted link), keep the old file's mode, fsync, rename:
    a host_vars file may hold secrets."""
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    tmp = path.with_name(path.name + ".dfp-tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def set_host_var(path: Path, key: str, value: Any) -> str:
    """Set `key: value` at the top level of a YAML host_vars file, keeping every other line; the unified diff."""
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    _refuse_to_rewrite(path, old, key, value)
    line = f"{key}: {json.dumps(value)}"
    pattern = re.compile(rf"^{re.escape(key)}\s*:.*$", re.MULTILINE)
    if pattern.search(old):
        new = pattern.sub(lambda _: line, old, count=1)
    else:
        new = old + ("" if not old or old.endswith("\n") else "\n") + line + "\n"
    _check_round_trip(path, old, new, key, value)
    if new != old:
        path.parent.mkdir(parents=True, exist_ok=True)
        _replace_file(path, new)
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), str(path), str(path)))


def apply_choice(host: str, tuned: dict, inventory: str, write: bool) -> str:
    """Write the chosen k where the next provision reads it, or say loudly that no k pays."""
    choice = tuned.get("choice") or {}
    if tuned.get("failed"):  # a failed step: what the host's record holds may be an earlier tune's; write nothing
        return f"{host}: TUNE FAILED: {tuned['failed']} (nothing was written)"
    k = choice.get("chosen_k")
    if k is not None and not (isinstance(k, int) and not isinstance(k, bool) and k in (tuned.get("measured") or [])):
        return f"{host}: TUNE FAILED: the host reported chosen_k {k!r}, which is not a k this tune measured (nothing was written)"
    if choice.get("baseline_tokens_per_s") is None:
        return f"{host}: TUNE FAILED: the baseline was not measured at concurrency {choice.get('concurrency')}; no choice (nothing was written)"
    if k is None:
        return (f"{host}: !!! NO k MAKES THE DRAFTER PAY !!! {choice.get('recommendation', '')}. Serve without it: set "
                f"`drafter_model: null` for {host} (host_vars) and provision; nothing was written.")
    bands = choice.get("schedule")
    if bands and not any(band[2] for band in bands):
        return (f"{host}: !!! NO k MAKES THE DRAFTER PAY at any measured concurrency !!! Serve without it: set "
                f"`drafter_model: null` for {host} (host_vars) and provision; nothing was written.")
    if bands:
        k = max(band[2] for band in bands)  # vLLM caps each band's k at num_speculative_tokens
    said = f"schedule {bands} (num_speculative_tokens {k})" if bands else f"num_speculative_tokens {k}"
    if not write:
        return f"{host}: chosen {said} (--no-write: host_vars left as they are)"
    path = host_vars_file(inventory, host)
    diff = set_host_var(path, "num_speculative_tokens", k)
    if bands or choice.get("per_level"):
        diff += set_host_var(path, "speculative_schedule", bands)
    note = f"\n  {choice['schedule_note']}" if choice.get("schedule_note") else ""
    return f"{host}: {said} -> {path}\n" + (diff or "  (already set: no change)\n") + \
        "  the next `invoke provision` restarts the server with it" + note


def tune(c: Any = None, **opts: Any) -> None:
    """The command body of `invoke tune`."""
    try:
        code, per_host = tune_run(opts)
        inventory = inventories_of(opts.get("inventory"), DEFAULT_INVENTORY)[-1]
        for host, tuned in per_host.items():
            if tuned.get("choice"):
                print(tune_table(host, tuned))
            print(apply_choice(host, tuned, inventory, bool(opts.get("write", True))))
    except UserError as exc:
        raise fail_user(exc) from None
    write_json(opts.get("json"), by_host_or_one(per_host, opts))
    pages = {h: {"tune": t} for h, t in per_host.items() if t.get("choice")}
    if pages:
        print(f"HTML: {', '.join(write_html(html_dir(opts), pages))}")
    if code:
        raise Exit(code=code)
