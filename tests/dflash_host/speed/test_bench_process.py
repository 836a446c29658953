"""Where vllm bench serve runs: one resident python for all runs where vLLM's CLI imports, else a process a run.

vLLM itself is the outer boundary here: a stand-in package `vllm.entrypoints.cli.main` (what the `vllm` console
script calls) records each call with its pid, argv and API key; the real one runs in tests/serving's e2e tests.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from dflash_host.speed.bench_process import BenchRunner, BenchUnavailable

STAND_IN_MAIN = r"""
import json, os, sys, time
def main():
    argv = sys.argv[1:]
    with open(os.environ["CALLS"], "a") as fh:
        fh.write(json.dumps({"pid": os.getpid(), "argv": argv, "key": os.environ.get("OPENAI_API_KEY")}) + "\n")
    print("vLLM says a lot on stdout")  # must not be taken for a reply
    if "--fail" in argv:
        sys.stderr.write("ValueError: this vLLM takes one run a process\n")
        raise SystemExit(2)
    if "--hang" in argv:
        time.sleep(60)
"""

ONE_SHOT = r"""
import json, os, sys
with open(os.environ["CALLS"], "a") as fh:
    fh.write(json.dumps({"pid": os.getpid(), "argv": sys.argv[1:], "key": os.environ.get("OPENAI_API_KEY"),
                         "one_shot": True}) + "\n")
"""


def stand_in(tmp_path: Path, with_package: bool = True) -> tuple:
    """(runner, calls file): a `vllm` script beside this python and, with_package, an importable stand-in CLI."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cli = bin_dir / "vllm"
    cli.write_text(f"#!{sys.executable}\n{ONE_SHOT}")
    cli.chmod(0o755)
    calls = tmp_path / "calls.jsonl"
    env = {"PATH": os.environ["PATH"], "CALLS": str(calls)}
    if with_package:
        pkg = tmp_path / "site" / "vllm" / "entrypoints" / "cli"
        pkg.mkdir(parents=True)
        for folder in (pkg.parent.parent, pkg.parent, pkg):
            (folder / "__init__.py").write_text("")
        (pkg / "main.py").write_text(STAND_IN_MAIN)
        env["PYTHONPATH"] = str(tmp_path / "site")
    return BenchRunner(str(cli), sys.executable, env, timeout_s=20), calls


def read(calls: Path) -> list:
    return [json.loads(line) for line in calls.read_text().splitlines()]


def test_every_run_goes_through_one_resident_process_and_the_key_stays_out_of_argv(tmp_path):
    runner, calls = stand_in(tmp_path)
    try:
        runner.run(["bench", "serve", "--num-prompts", "4"], {"OPENAI_API_KEY": "k-1"})
        runner.run(["bench", "serve", "--num-prompts", "8"], {"OPENAI_API_KEY": None})
        runner.run(["bench", "serve", "--num-prompts", "16"], {"OPENAI_API_KEY": "k-2"})
    finally:
        runner.close()
    seen = read(calls)
    assert len({c["pid"] for c in seen}) == 1 and not any(c.get("one_shot") for c in seen)
    assert [c["argv"][-1] for c in seen] == ["4", "8", "16"] and [c["key"] for c in seen] == ["k-1", None, "k-2"]
    assert runner.how == "one resident process (3 runs)"


def test_a_failed_resident_run_is_run_again_in_its_own_process_and_the_reason_kept(tmp_path):
    runner, calls = stand_in(tmp_path)
    try:
        runner.run(["bench", "serve", "--fail"], {"OPENAI_API_KEY": "k"})
        runner.run(["bench", "serve", "--again"], {"OPENAI_API_KEY": "k"})
    finally:
        runner.close()
    seen = read(calls)
    assert [bool(c.get("one_shot")) for c in seen] == [False, True, True] and seen[1]["key"] == "k"
    assert "exited 2" in runner.how and "this vLLM takes one run a process" in runner.how, runner.how
    assert runner.how.startswith("0 runs resident, 2 in a process each")


def test_a_python_without_vllm_runs_a_process_a_run_and_says_why(tmp_path):
    runner, calls = stand_in(tmp_path, with_package=False)
    try:
        runner.run(["bench", "serve"], {"OPENAI_API_KEY": None})
    finally:
        runner.close()
    assert [c.get("one_shot") for c in read(calls)] == [True]
    assert "vLLM's CLI does not import" in runner.how and "ModuleNotFoundError" in runner.how, runner.how


def test_a_hanging_run_is_ended_at_its_timeout(tmp_path):
    runner, _calls = stand_in(tmp_path)
    runner.timeout_s = 3
    (tmp_path / "bin" / "vllm").write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    try:
        with pytest.raises(BenchUnavailable, match="ran longer than 3 s"):
            runner.run(["bench", "serve", "--hang"], {})
        assert runner.resident is None and "ran longer than 3 s (a run)" in (runner.why_not_resident or "")
    finally:
        runner.close()
