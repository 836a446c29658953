"""The drafter's speed figures on the host: recorded, and judged by the speed gate.

`action: record` writes the last figures of a serving benchmark or a tune (runs with the drafter,
runs without it, k, acceptance, when, the load generator) into the host's state file and its Prometheus
textfile (dflash_host.speed.state). `action: lookup` returns the speed gate's cached measurement for
the configured launch (its fingerprint) and concurrency: `hit` false means it must be measured (with
vllm_variant and serving_bench). `action: gate` records the measurement, caches it for the launch and
judges it: the speed-up at the gate's concurrency below min_speedup warns (speedup_gate: warn) or fails
(fail), naming both throughputs. k and the fingerprint come from the configured launch (vllm_pidfile).
"""

from __future__ import annotations

import os
import socket
import time

from dflash_host.host.paths import managed_path
from dflash_host.module import Context, ModuleError, main
from dflash_host.speed.prefix_cache import compare_prefix
from dflash_host.speed.speedup import by_concurrency, choose_k, compare_levels, gate, schedule
from dflash_host.speed.state import cached_gate, figures, read_state, state_file_for, utc, write_state, write_textfile
from dflash_host.vllm import paths, read_launch

ARGS = {
    "action": {"type": "str", "default": "record", "choices": ["record", "lookup", "gate", "tune_step", "tune_choose"],
               "help": "record: write the figures; lookup: must the gate measure this launch; gate: record, cache, judge; "
               "tune_step: keep one variant's runs of a tune; tune_choose: choose k from them and record the choice"},
    "variant": {"type": "raw", "default": None, "help": "tune_step: baseline (starts a tune) or the k the runs were measured with"},
    "runs": {"type": "list", "default": [], "help": "serving_bench runs with the configured drafter (one per concurrency)"},
    "baseline_runs": {"type": "list", "default": [], "help": "serving_bench runs without the drafter"},
    "load_generator": {"type": "str", "default": None, "help": "what produced the load (serving_bench's load_generator)"},
    "interleaved": {"type": "bool", "default": False,
                    "help": "the runs and baseline_runs were measured in turns (paired repetitions); else one after the other"},
    "workload": {"type": "dict", "default": None, "help": "what was sent (serving_bench's workload), recorded with the figures"},
    "dynamic_k": {"type": "bool", "default": False,
                  "help": "tune_step: the host's vLLM takes a k per batch size (serving_bench's dynamic_k)"},
    "source": {"type": "str", "default": "serving-bench", "help": "what measured: serving-bench, tune or speed-gate"},
    "choice": {"type": "dict", "default": None, "help": "tune's choice (dflash_host.speed.speedup.choose_k), recorded as is"},
    "num_speculative_tokens": {"type": "raw", "default": None,
                               "help": "k the runs were measured with; none: the configured launch's"},
    "pidfile": {"include": "vllm_pidfile", "required": True, "help": "the configured server's pidfile: its launch gives k and the fingerprint"},
    "root": {"include": "dfp_root", "help": "dfp_root: the state file lies inside it"},
    "state_file": {"type": "path", "default": None, "var": "speed_state_file",
                   "help": "the host's speed record; none: <dfp_root>/state/speed.json"},
    "textfile_dir": {"type": "path", "default": None, "var": "prometheus_textfile_dir",
                     "help": "node_exporter's --collector.textfile.directory (dflash.prom goes there); none: <dfp_root>/metrics"},
    "host_label": {"type": "str", "default": None, "help": "the textfile's host label; none: the host's name"},
    "mode": {"type": "str", "default": "off", "choices": ["off", "warn", "fail"], "var": "speedup_gate",
             "help": "what a drafter slower than min_speedup x the baseline does: nothing, a warning, a failure"},
    "min_speedup": {"type": "float", "default": 1.0, "var": "min_speedup",
                    "help": "tokens/s with the drafter / without it below which the speed gate warns or fails"},
    "concurrency": {"type": "int", "default": 16, "var": "tune_concurrency",
                    "help": "concurrent requests the server is sized for: tune chooses k and the gate judges at it"},
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("root", "state_file", "textfile_dir", "pidfile")


def _places(args: dict) -> tuple:
    """(state file, textfile folder), each a place the tool may write."""
    root = args["root"]
    if not root and not (args["state_file"] and args["textfile_dir"]):
        raise ModuleError("dfp_root is empty; set it, or set both speed_state_file and prometheus_textfile_dir")
    state_file = state_file_for(root, args["state_file"])
    folder = args["textfile_dir"] or os.path.join(os.path.expanduser(root), "metrics")
    managed_path(state_file, "speed_state_file", root if not args["state_file"] else None)
    managed_path(folder, "prometheus_textfile_dir")
    return state_file, folder


def _launch_facts(args: dict, launch: dict | None = None) -> tuple:
    """(k, fingerprint) of the configured launch (read here unless given); k from the task when it names one."""
    if launch is None:
        launch = read_launch(paths(args["pidfile"])["launch"]) or {}
    k = args["num_speculative_tokens"]
    if k is None:
        k = (launch.get("speculative") or {}).get("num_speculative_tokens")
    return (int(k) if k is not None else None), launch.get("fingerprint")


def _record(args: dict, ctx: Context, extra: dict | None = None) -> dict:
    state_file, folder = _places(args)
    k, fingerprint = _launch_facts(args)
    comparison = compare_levels(args["runs"], args["baseline_runs"], args["interleaved"], args["min_speedup"])
    figs = figures(args["runs"], args["baseline_runs"], k, args["load_generator"], args["concurrency"], args["source"],
                   comparison=comparison)
    figs["comparison"] = comparison
    figs["prefix_cache"] = compare_prefix(args["runs"], args["baseline_runs"])  # the drafter losing the cache
    for verdict in figs["prefix_cache"].values():
        if verdict["verdict"] == "lost":
            ctx.warn(verdict["says"])
    figs["workload"] = args["workload"]
    figs["interleaved"] = args["interleaved"]
    if args["choice"]:
        figs["choice"] = args["choice"]
        figs["num_speculative_tokens"] = args["choice"].get("chosen_k")
    figs["fingerprint"] = fingerprint
    if ctx.check:
        return {"changed": True, "figures": figs, "msg": f"would record the speed figures in {state_file}"}
    state = read_state(state_file)
    state["last"] = figs
    state.update(extra or {})
    write_state(state_file, state)
    textfile, _ = write_textfile(folder, figs, args["host_label"] or socket.gethostname())
    ups = "; ".join(f"c={c}: {v['says']}" for c, v in figs["comparison"].items()) or "no baseline measured"
    return {"changed": True, "figures": figs, "state_file": state_file, "textfile": textfile, "runs": args["runs"],
            "baseline_runs": args["baseline_runs"],
            "msg": f"recorded speed figures (speed-up {ups}; k={figs['num_speculative_tokens']}) in {state_file} and {textfile}"}


def _throughputs(args: dict) -> tuple:
    c = args["concurrency"]
    with_ = by_concurrency(args["runs"]).get(c, {}).get("output_tokens_per_s")
    without = by_concurrency(args["baseline_runs"]).get(c, {}).get("output_tokens_per_s")
    return with_, without


def _judge(entry: dict, args: dict, ctx: Context, cluster: bool) -> tuple:
    """(verdict, message) of a measurement under the current mode and min_speedup (a cluster's advice differs);
    fail raises."""
    verdict_, sentence = gate(entry, args["min_speedup"], args["mode"], cluster)
    both = (f"{_tps(entry.get('tokens_per_s'))} tokens/s with the drafter (k={entry.get('num_speculative_tokens')}), "
            f"{_tps(entry.get('baseline_tokens_per_s'))} without it, at concurrency {entry.get('concurrency')}")
    message = f"speed gate: {sentence}: {both}"
    if verdict_ == "fail":
        raise ModuleError(message + " (speedup_gate: fail; the server keeps running)", speed_gate_failed=True, **entry)
    if verdict_ == "warn":
        ctx.warn(message)
    return verdict_, message


def _tps(value: object) -> str:
    return f"{value:,.1f}" if isinstance(value, (int, float)) else "n/a"


def lookup(args: dict, ctx: Context) -> dict:
    """Whether the gate must measure this launch (`measure`), or has its figures cached (`hit`)."""
    if args["mode"] == "off":  # nothing to read: an unusable record must not fail a provision that never gates
        return {"hit": False, "measure": False, "mode": "off", "fingerprint": None, "concurrency": args["concurrency"],
                "cached": None, "msg": "speed gate off"}
    state_file, _ = _places(args)
    _, fingerprint = _launch_facts(args)
    entry = cached_gate(read_state(state_file), fingerprint, args["concurrency"])
    on = args["mode"] != "off"
    msg = ("speed gate off" if not on else "cached speed measurement of this launch" if entry
           else "no speed measurement of this launch yet: measuring with and without the drafter")
    return {"hit": entry is not None, "measure": on and entry is None, "mode": args["mode"], "fingerprint": fingerprint,
            "concurrency": args["concurrency"], "cached": entry, "msg": msg}


def judge(args: dict, ctx: Context) -> dict:
    """The gate: the runs given (recorded and cached for the launch), else the cached ones; fail raises."""
    launch = read_launch(paths(args["pidfile"])["launch"]) or {}
    k, fingerprint = _launch_facts(args, launch)
    state_file, _ = _places(args)
    out: dict = {"changed": False}
    entry = None if args["runs"] else cached_gate(read_state(state_file), fingerprint, args["concurrency"])
    if entry is None:
        with_, without = _throughputs(args)
        measured = compare_levels(args["runs"], args["baseline_runs"], args["interleaved"], args["min_speedup"])
        at = measured.get(str(args["concurrency"])) or {}
        entry = {"fingerprint": fingerprint, "concurrency": args["concurrency"], "num_speculative_tokens": k,
                 "tokens_per_s": with_, "baseline_tokens_per_s": without,
                 "speedup": at.get("speedup") or (round(with_ / without, 3) if with_ and without else None),
                 "low": at.get("low"), "high": at.get("high"), "pairs": at.get("pairs"),
                 "interval_verdict": at.get("verdict"), "measured_at_utc": utc(time.time())}
        out = _record({**args, "source": "speed-gate"}, ctx, {"gate": entry})
    verdict, message = _judge(entry, args, ctx, bool(launch.get("cluster")))
    return {**out, **entry, "verdict": verdict, "msg": message}


def tune_step(args: dict, ctx: Context) -> dict:
    """One measured variant of a tune: the baseline starts a new tune, each k adds its runs."""
    state_file, _ = _places(args)
    variant = args["variant"]
    state = read_state(state_file)
    if variant in (None, "baseline"):
        state["tune"] = {"started_at_utc": utc(time.time()), "baseline_runs": args["runs"], "by_k": {},
                         "load_generator": args["load_generator"], "workload": args["workload"],
                         "dynamic_k": bool(args["dynamic_k"])}
    elif not isinstance(state.get("tune"), dict):
        raise ModuleError(f"tune: k={variant} was measured before the baseline; run `invoke tune`, which measures it first")
    else:
        state["tune"]["by_k"][str(int(variant))] = args["runs"]
    if not ctx.check:
        write_state(state_file, state)
    return {"changed": True, "variant": variant, "msg": f"recorded the tune's runs of {variant} in {state_file}"}


def per_level_choice(tune: dict, by_k: dict, args: dict) -> dict:
    """Measured at several concurrency levels: the k of each level and, where the host's vLLM takes a k per batch
    size, the schedule made of them (else why one k is served)."""
    levels = sorted(by_concurrency(tune["baseline_runs"]))
    if len(levels) < 2:
        return {}
    per_level = {c: choose_k(tune["baseline_runs"], by_k, c, args["min_speedup"]) for c in levels}
    out: dict = {"per_level": {str(c): {"chosen_k": ch["chosen_k"], "recommendation": ch["recommendation"],
                                        "table": ch["table"]} for c, ch in per_level.items()}}
    if tune.get("dynamic_k"):
        out["schedule"] = schedule({c: ch["chosen_k"] for c, ch in per_level.items()})
    else:
        out["schedule_note"] = ("this vLLM has no num_speculative_tokens_per_batch_size (dynamic speculative decoding, "
                                f"vLLM 0.32 and later): one k, chosen at concurrency {args['concurrency']}")
    return out


def tune_choose(args: dict, ctx: Context) -> dict:
    """choose_k over the tune's recorded runs, at the configured concurrency; the choice is the last figures."""
    state_file, _ = _places(args)
    tune = read_state(state_file).get("tune")
    if not isinstance(tune, dict) or not tune.get("baseline_runs"):
        raise ModuleError(f"tune: {state_file} holds no baseline measurement of a tune; run `invoke tune`")
    by_k = {int(k): runs for k, runs in (tune.get("by_k") or {}).items()}
    choice = choose_k(tune["baseline_runs"], by_k, args["concurrency"], args["min_speedup"])
    choice.update(per_level_choice(tune, by_k, args))
    chosen = by_k.get(choice["chosen_k"]) if choice["chosen_k"] is not None else None
    best = max(by_k.items(), key=lambda kv: float(by_concurrency(kv[1]).get(args["concurrency"], {}).get(
        "output_tokens_per_s") or 0.0), default=(None, []))
    runs = chosen or best[1]
    out = _record({**args, "runs": runs, "baseline_runs": tune["baseline_runs"], "choice": choice, "source": "tune",
                   "load_generator": tune.get("load_generator"), "num_speculative_tokens": choice["chosen_k"] or best[0]}, ctx)
    if choice["chosen_k"] is None:
        ctx.warn("tune: " + choice["recommendation"])
    out.update(choice=choice, by_k={str(k): v for k, v in sorted(by_k.items())}, baseline_runs=tune["baseline_runs"],
               msg=f"tune at concurrency {args['concurrency']}: {choice['recommendation']}")
    return out


ACTIONS = {"lookup": lookup, "gate": judge, "tune_step": tune_step, "tune_choose": tune_choose}


def run(args: dict, ctx: Context) -> dict:
    return ACTIONS.get(args["action"], _record)(args, ctx)


if __name__ == "__main__":
    main(ARGS, run)
