"""vllm_server against the stand-in server (tests/fakes/fake_vllm.py): real processes, real HTTP, real logs.

The stand-in is started exactly as vLLM would be (`PYTHON -m vllm.entrypoints.cli.main serve ...` in its
own session, pidfile, log with a start marker); FAKE_VLLM_MODE in vllm_env makes it fail in the ways
vLLM does. Every test stops what it started (the module's own stop, then the recorded process group).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from dflash_host.module import Context, execute
from dflash_host.vllm.log import marker_line
from library import vllm_server, vllm_status
from tests.fakes.vllm_processes import free_port, kill_leftovers

ROOT = Path(__file__).resolve().parent.parent.parent
FAKE_PKG = ROOT / "tests" / "fakes" / "vllm_pkg"


class Fake:
    """One managed stand-in server in a temp folder."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.target, self.drafter = tmp / "models" / "target", tmp / "models" / "dflash"
        self.target.mkdir(parents=True)
        self.drafter.mkdir(parents=True)
        (self.target / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
        (self.drafter / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"]}))
        self.port = free_port()
        self.pidfile = tmp / "run" / "vllm.pid"
        self.log = tmp / "logs" / "vllm.log"
        self.mode = "normal"
        self.extra_env: dict = {}
        self.over: dict = {}

    def render_args(self, **over) -> dict:
        args = {
            "state": "rendered",
            "pidfile": str(self.pidfile),
            "log": str(self.log),
            "venv_python": sys.executable,
            "target_model": str(self.target),
            "drafter_model": str(self.drafter),
            "served_model_name": "target",
            "port": self.port,
            "flavor": "cpu",
            "num_speculative_tokens": 3,
            "env": {"PYTHONPATH": str(FAKE_PKG), "FAKE_VLLM_MODE": self.mode, **self.extra_env},
            "readiness_timeout_s": 20,
            "stop_grace_s": 5,
            "smoke_max_tokens": 8,
            "log_keep": 3,
        }
        args.update(self.over)
        args.update(over)
        return args

    def call(self, state: str, check: bool = False, **over) -> dict:
        args = self.render_args(**over) if state == "rendered" else {"pidfile": str(self.pidfile), **over}
        args["state"] = state
        ctx = Context(check=check, diff=True)
        return json.loads(json.dumps(execute(vllm_server.ARGS, vllm_server.run, args, ctx, "vllm_server"), default=str))

    def up(self, **over) -> dict:
        r = self.call("rendered", **over)
        assert not r["failed"], r["msg"]
        return self.call("started")

    def record(self) -> dict | None:
        try:
            return json.loads(self.pidfile.read_text())
        except (OSError, ValueError):
            return None

    def new_log(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def cleanup(self) -> None:
        self.call("stopped")
        leaked = kill_leftovers([self.log.parent])  # belt and braces: nothing of ours may survive a test
        assert not leaked, f"processes of a stand-in server survived the test: {leaked}"


@pytest.fixture
def fake(tmp_path):
    f = Fake(tmp_path)
    yield f
    f.cleanup()


def group_alive(pgid: int) -> list:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (OSError, psutil.Error):
            pass
    return out


# --------------------------------------------------------------------------- happy path and idempotency


def test_start_proves_readiness_smoke_and_acceptance_then_second_run_is_unchanged(fake):
    res = fake.up()
    assert res["changed"] and not res["failed"], res["msg"]
    assert res["resolved_architectures"] == ["Qwen3ForCausalLM", "DFlashDraftModel"]
    assert res["smoke_tokens"] == 3 * 8 and res["spec_decode"] and res["acceptance_rate"] == 0.0
    log = fake.new_log().splitlines()
    assert log[0].startswith(f"=== dflash-provision: vLLM server start pid={res['pid']} ")
    rec = fake.record()
    assert rec["pid"] == res["pid"] and rec["pgid"] == res["pid"]  # its own session and group
    assert any("--engine-core" in " ".join(e["cmdline"]) for e in rec["tree"])  # EngineCore recorded once ready

    again = fake.call("rendered")
    assert not again["changed"] and not again["failed"]
    again = fake.call("started")
    assert not again["changed"] and not again["failed"], again["msg"]
    assert again["pid"] == res["pid"] and "serving" in again["msg"]


def test_a_changed_launch_restarts_once_through_the_handler_path(fake):
    first = fake.up()
    fake.extra_env = {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    rendered = fake.call("rendered")
    assert rendered["changed"] and rendered["diff"]["after"]["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    # the role's "start if not running" task leaves a stale server to the handler ...
    stale = fake.call("started", restart_stale=False)
    assert not stale["changed"] and stale["stale"] and stale["pid"] == first["pid"]
    # ... and the handler restarts it once
    handler = fake.call("restarted", only_if_stale=True)
    assert handler["changed"] and handler["pid"] != first["pid"], handler["msg"]
    assert not psutil.pid_exists(first["pid"]) or psutil.Process(first["pid"]).status() == psutil.STATUS_ZOMBIE
    again = fake.call("restarted", only_if_stale=True)
    assert not again["changed"] and again["pid"] == handler["pid"]


def test_first_start_then_handler_does_not_restart_a_second_time(fake):
    fake.call("rendered")
    started = fake.call("started", restart_stale=False)
    assert started["changed"]
    handler = fake.call("restarted", only_if_stale=True)
    assert not handler["changed"] and handler["pid"] == started["pid"]


def _edit_record(fake, **change) -> dict:
    """Rewrite the pidfile with every entry (top and tree) changed by `change`: {field: f(old value)}."""
    original = fake.record()
    edit = lambda e: {**e, **{k: f(e[k]) for k, f in change.items()}}  # noqa: E731
    fake.pidfile.write_text(json.dumps({**edit(original), "tree": [edit(e) for e in original["tree"]]}))
    return original


def test_a_clock_stepped_after_the_start_leaves_the_server_ours(fake):
    """NTP stepping the clock after boot (or a VM resumed from a pause) moves every wall-clock start time:
    the handler must still know its server, not start a second one onto the same port."""
    started = fake.up()
    _edit_record(fake, start_time=lambda t: t - 300)
    handler = fake.call("restarted", only_if_stale=True)
    assert not handler["changed"] and not handler["failed"] and handler["pid"] == started["pid"], handler["msg"]


def test_a_port_held_by_a_refused_pidfile_process_says_why_it_was_refused(fake):
    started = fake.up()
    original = _edit_record(fake, since_boot=lambda t: t + 7)  # as if the PID had been reused
    try:
        res = fake.call("restarted")
        assert res["failed"] and "nothing was started" in res["msg"], res["msg"]
        assert f"were not proven ours, so none was stopped (PID {started['pid']} was reused" in res["msg"], res["msg"]
    finally:
        fake.pidfile.write_text(json.dumps(original))  # ours again: the fixture's cleanup stops it


def test_model_file_change_makes_the_launch_stale(fake):
    fake.up()
    time.sleep(0.01)
    (fake.drafter / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"], "block_size": 8}))
    assert fake.call("rendered")["changed"]


def test_check_mode_starts_nothing_and_writes_nothing(fake):
    res = fake.call("rendered", check=True)
    assert res["changed"] and not (fake.tmp / "run").exists()
    fake.call("rendered")
    res = fake.call("started", check=True)
    assert res["changed"] and "would" in res["msg"]
    assert not fake.pidfile.exists() and not fake.log.exists()


def test_stop_stops_the_whole_tree_and_a_second_stop_is_ok(fake):
    res = fake.up()
    pgid = fake.record()["pgid"]
    assert len(group_alive(pgid)) >= 2
    stop = fake.call("stopped")
    assert stop["changed"] and not group_alive(pgid)
    assert not fake.pidfile.exists()
    again = fake.call("stopped")
    assert not again["changed"] and not again["failed"]
    assert res["pid"]


def test_absent_removes_launch_and_env_files_but_keeps_logs(fake):
    fake.up()
    res = fake.call("absent")
    assert res["changed"]
    assert sorted(os.listdir(fake.tmp / "run")) == ["vllm.torndown.json"]  # for invoke status: torn down, not unknown
    assert json.loads((fake.tmp / "run" / "vllm.torndown.json").read_text())["port"] == fake.port
    assert fake.log.exists()
    assert not fake.call("absent")["changed"]


def test_leftovers_of_a_killed_server_are_stopped_before_a_new_start(fake):
    first = fake.up()
    core = [e["pid"] for e in fake.record()["tree"] if "--engine-core" in " ".join(e["cmdline"])][0]
    os.kill(first["pid"], signal.SIGKILL)  # the top PID alone: EngineCore survives as an orphan
    time.sleep(0.3)
    assert psutil.Process(core).is_running()
    res = fake.call("started")
    assert res["changed"] and "leftovers" in res["reason"], res["msg"]
    assert not psutil.pid_exists(core) or psutil.Process(core).status() == psutil.STATUS_ZOMBIE


# --------------------------------------------------------------------------- fail fast, root cause


def test_crash_at_start_fails_fast_quoting_the_first_exception(fake):
    fake.mode = "crash_start"
    t0 = time.monotonic()
    res = fake.up()
    took = time.monotonic() - t0
    assert res["failed"] and took < 3.0, (took, res["msg"])
    assert "AssertionError: Tried to load weights" in res["msg"]
    assert "Engine core initialization failed" not in " ".join(res["root_cause"])
    assert str(fake.log) in res["msg"]
    assert not fake.pidfile.exists()


def test_death_during_readiness_is_reported_within_a_second(fake):
    fake.mode = "slow"
    fake.extra_env = {"FAKE_VLLM_READY_S": "30"}
    fake.call("rendered")
    killed_at = {}

    def kill_soon():
        deadline = time.time() + 10
        while time.time() < deadline:
            rec = fake.record()
            if rec and "Resolved architecture: DFlashDraftModel" in fake.new_log():
                time.sleep(0.3)
                os.kill(rec["pid"], signal.SIGKILL)
                killed_at["t"] = time.monotonic()
                return
            time.sleep(0.05)

    t = threading.Thread(target=kill_soon)
    t.start()
    res = fake.call("started")
    failed_at = time.monotonic()
    t.join()
    assert res["failed"] and "exited with code -9" in res["msg"], res["msg"]
    assert failed_at - killed_at["t"] < 1.0


def test_fatal_line_while_alive_fails_fast_and_stops_the_server(fake):
    fake.mode = "fatal_alive"
    t0 = time.monotonic()
    res = fake.up()
    assert res["failed"] and time.monotonic() - t0 < 3.0, res["msg"]
    assert "while the process still runs" in res["msg"] and "CUDA out of memory" in res["msg"]
    assert "stopped what was left" in res["msg"]
    pid = int(re.search(r"pid=(\d+)", fake.new_log()).group(1))
    assert not group_alive(pid)


def test_hang_before_listening_fails_at_the_readiness_budget(fake):
    fake.mode = "hang"
    t0 = time.monotonic()
    res = fake.up(readiness_timeout_s=2)
    took = time.monotonic() - t0
    assert res["failed"] and 2.0 <= took < 4.0, (took, res["msg"])
    assert "not ready within readiness_timeout_s" in res["msg"] and "/health" in res["msg"]
    pid = int(re.search(r"pid=(\d+)", fake.new_log()).group(1))
    assert not group_alive(pid)


def test_engine_dying_on_the_first_request_is_caught_by_the_smoke_completion(fake):
    fake.mode = "crash_first_request"
    res = fake.up()
    assert res["failed"] and "smoke completion" in res["msg"], res["msg"]
    assert "Unsupported CPU attention configuration: head_dim=16" in res["msg"]


def test_slow_readiness_is_noticed_within_half_a_second(fake):
    fake.mode = "slow"
    fake.extra_env = {"FAKE_VLLM_READY_S": "2"}
    res = fake.up()
    assert res["changed"] and not res["failed"], res["msg"]
    listening = float(re.search(r"listening since (\d+\.\d+)", fake.new_log()).group(1))
    assert 0 <= res["ready_at"] - listening < 0.5
    assert res["ready_s"] >= 2.0


def test_unknown_vllm_flag_fails_fast_quoting_vllms_own_error(fake):
    res = fake.up(extra_args=["--no-such-flag", "7"])
    assert res["failed"] and "unrecognized arguments: --no-such-flag 7" in res["msg"], res["msg"]


# --------------------------------------------------------------------------- ports, logs, secrets


def test_port_taken_by_another_program_fails_before_launch_naming_it(fake):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',{fake.port}))\ns.listen()\ntime.sleep(60)",
        ]
    )
    try:
        deadline = time.time() + 5
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", fake.port)) == 0:
                    break
            time.sleep(0.05)
        res = fake.up()
        assert res["failed"] and f"PID {holder.pid}" in res["msg"] and "vllm_port" in res["msg"], res["msg"]
        assert not fake.pidfile.exists() and not fake.log.exists()
    finally:
        holder.kill()
        holder.wait()


def test_rotation_while_an_orphan_writes_the_old_log_keeps_checks_on_the_new_log(fake):
    fake.log.parent.mkdir(parents=True)
    # a log of an earlier server of ours: it starts with the tool's start marker (no live PID: beyond pid_max)
    fake.log.write_text(marker_line(999999999, "old") + "\nold server output\n")
    # an orphan of the old server keeps writing (even a Traceback) into the old log through its open fd
    orphan = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys,time\nf=open(sys.argv[1],'a')\nwhile True:\n"
            " f.write('ORPHAN Traceback (most recent call last):\\n'); f.flush(); time.sleep(0.02)",
            str(fake.log),
        ],
        start_new_session=True,
    )
    try:
        time.sleep(0.2)
        res = fake.up()
        assert res["changed"] and not res["failed"], res["msg"]
        rotated = Path(res["rotated_log"])
        time.sleep(0.1)
        assert "ORPHAN" not in fake.new_log()
        assert rotated.read_text().count("ORPHAN") > 5 and rotated.read_text().splitlines()[1] == "old server output"
        # the next start rotates again; the file the orphan holds is never deleted, even beyond log_keep
        for _ in range(4):
            assert not fake.call("restarted", log_keep=1)["failed"]
        assert rotated.exists()
    finally:
        orphan.kill()
        orphan.wait()


def test_secrets_stay_in_the_0600_env_file(fake, tmp_path):
    key_file = tmp_path / "api.key"
    key_file.write_text("sk-very-secret\n")
    rendered = fake.call("rendered", api_key_file=str(key_file), hf_token="hf_tok_secret")
    res = fake.call("started")
    assert res["changed"] and not res["failed"], res["msg"]  # the smoke request authenticated
    everything = json.dumps([rendered, res]) + (fake.tmp / "run" / "vllm.launch.json").read_text()
    assert "sk-very-secret" not in everything and "hf_tok_secret" not in everything
    assert "sk-very-secret" not in " ".join(psutil.Process(res["pid"]).cmdline())
    env_file = fake.tmp / "run" / "vllm.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600 and "sk-very-secret" in env_file.read_text()
    assert "sk-very-secret" not in fake.new_log()


@pytest.mark.parametrize(
    "accept, gate, rate, failed",
    [("0", "warn", 0.0, False), ("0", "fail", 0.0, True), ("0.67", "fail", 0.6667, False)],
)
def test_acceptance_gate(fake, accept, gate, rate, failed):
    fake.extra_env = {"FAKE_VLLM_ACCEPT": accept}
    res = fake.up(min_acceptance_rate=0.3, acceptance_gate=gate)
    assert res["failed"] is failed, res["msg"]
    assert res["acceptance_rate"] == rate
    if failed:
        assert "acceptance gate failed" in res["msg"]
    elif rate == 0.0:
        assert any("below min_acceptance_rate" in w for w in res["warnings"])
    else:
        assert res["mean_acceptance_length"] == 3.0


def test_bad_input_changes_nothing(fake):
    res = fake.call("rendered", port=0)
    assert res["failed"] and "vllm_port" in res["msg"]
    res = fake.call("rendered", num_speculative_tokens=0)
    assert res["failed"] and "num_speculative_tokens" in res["msg"]
    assert not (fake.tmp / "run").exists()
    res = fake.call("started")
    assert res["failed"] and "no rendered launch" in res["msg"]


def test_status_reports_running_server_and_then_not_running(fake):
    up = fake.up()
    st = execute(
        vllm_status.ARGS,
        vllm_status.run,
        {"pidfile": str(fake.pidfile), "nvidia_smi": "/nonexistent/nvidia-smi"},
        Context(),
        "vllm_status",
    )
    assert st["running"] and st["pid"] == up["pid"] and st["port"] == fake.port and st["health"] == "ok"
    assert st["served_model"] == "target" and st["acceptance_rate"] == 0.0 and st["mean_acceptance_length"] == 1.0
    assert st["gpu_used_mib"] is None and st["uptime_s"] >= 0
    fake.call("stopped")
    st = execute(vllm_status.ARGS, vllm_status.run, {"pidfile": str(fake.pidfile)}, Context(), "vllm_status")
    assert not st["running"] and st["pid"] is None and not st["changed"]


def test_module_runs_by_hand(fake, tmp_path):
    args = tmp_path / "args.json"
    args.write_text(json.dumps(fake.render_args()))
    out = subprocess.run([sys.executable, "-m", "library.vllm_server", str(args)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and json.loads(out.stdout)["changed"]
    args.write_text(json.dumps({"state": "started", "pidfile": str(fake.pidfile)}))
    out = subprocess.run([sys.executable, "-m", "library.vllm_server", str(args)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["changed"]


# --------------------------------------------------------------------------- the prefix cache and the burst (vllm.smoke_checks)


def test_a_start_checks_the_prefix_cache_and_a_burst_at_max_concurrency_then_a_verify_only_the_cache(fake):
    res = fake.up(max_num_seqs=3)
    assert not res["failed"], res["msg"]
    assert res["prefix_cache_verdict"] == "ok" and res["prefix_cache_hits"] > 0, res
    assert res["prefix_cache_hit_rate"] > 0.9 and "prefix cache hit" in res["msg"]
    assert res["burst_requests"] == 3 and res["burst_tokens"] == 3 * 8, res  # max_num_seqs 3 (under the cpu cap 4)
    assert "a burst of 3 concurrent requests served" in res["msg"]
    again = fake.call("started")
    assert not again["changed"] and again["prefix_cache_verdict"] == "ok" and "burst_requests" not in again


@pytest.mark.parametrize("gate, failed", [("warn", False), ("fail", True)])
def test_no_prefix_cache_hits_with_the_drafter_warns_or_fails_with_the_advice(fake, gate, failed):
    fake.mode = "no_prefix_hits_with_drafter"
    res = fake.up(acceptance_gate=gate)
    assert res["failed"] is failed, res["msg"]
    assert res["prefix_cache_verdict"] == gate and res["prefix_cache_hits"] == 0 and res["prefix_cache_queries"] > 100
    said = res["msg"] if failed else " ".join(res["warnings"])
    assert "hit the prefix cache for 0 tokens, with the drafter on" in said, said
    assert "54360, 51250, 57032" in said and "invoke serving-bench --host H --compare-baseline" in said
    if failed:
        assert res["prefix_cache_failed"] and "prefix cache gate failed" in res["msg"]


def test_the_same_server_without_the_drafter_hits_the_prefix_cache(fake):
    fake.mode = "no_prefix_hits_with_drafter"
    res = fake.up(drafter_model=None, acceptance_gate="fail")
    assert not res["failed"] and res["prefix_cache_verdict"] == "ok" and res["prefix_cache_hits"] > 0, res["msg"]


def test_a_crash_under_the_burst_fails_naming_what_it_saw_and_what_to_do(fake):
    fake.mode = "crash_on_burst"
    res = fake.up()  # cpu flavor, max_num_seqs unset: a burst of 4
    assert res["failed"], res["msg"]
    assert "concurrent smoke completions failed" in res["msg"] and "HTTP 500" in res["msg"], res["msg"]
    assert "CUDA error: an illegal memory access was encountered" in res["msg"]  # the log's root cause
    assert "enforce_eager: true" in res["msg"] and "42728, 55279; z-lab/dflash 146" in res["msg"]
    assert not fake.pidfile.exists()


def test_smoke_burst_zero_sends_none_and_a_bad_value_is_refused(fake):
    res = fake.up(smoke_burst=0)
    assert not res["failed"] and "burst_requests" not in res, res["msg"]
    bad = fake.call("rendered", smoke_burst="many")
    assert bad["failed"] and "smoke_burst is 'many'" in bad["msg"] and "0 for no burst" in bad["msg"]
