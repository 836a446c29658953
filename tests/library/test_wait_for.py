"""library/wait_for.py: real sockets, real files written by a thread while the module waits."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _helpers import ROOT, load_module, run_module

from dflash_host.module import ModuleError

wait_for = load_module("wait_for")


def call(args: dict, check: bool = False) -> dict:
    result = run_module(wait_for, args, check=check)
    assert result["changed"] is False
    return result


def later(delay: float, fn) -> threading.Thread:
    def go():
        time.sleep(delay)
        fn()

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def listener() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---------------------------------------------------------------- ports


def test_open_port_is_found_at_once():
    with listener() as s:
        res = call({"port": s.getsockname()[1], "timeout_s": 2})
    assert res["elapsed_s"] < 1


def test_waits_until_a_port_opens():
    port = free_port()
    holder = {}
    t = later(0.3, lambda: holder.setdefault("s", socket.create_server(("127.0.0.1", port))))
    try:
        res = call({"port": port, "state": "started", "timeout_s": 5, "sleep_s": 0.05})
        assert 0.25 <= res["elapsed_s"] < 4
    finally:
        t.join()
        holder["s"].close()


def test_waits_until_a_port_closes():
    s = listener()
    port = s.getsockname()[1]
    later(0.3, s.close)
    res = call({"port": port, "state": "stopped", "timeout_s": 5, "sleep_s": 0.05})
    assert 0.25 <= res["elapsed_s"] < 4


def test_port_timeout_names_what_was_awaited_and_for_how_long():
    port = free_port()
    start = time.monotonic()
    with pytest.raises(ModuleError) as err:
        call({"port": port, "timeout_s": 0.3})
    assert time.monotonic() - start < 2
    assert f"timed out after 0.3 s (timeout_s) waiting for port 127.0.0.1:{port} to be open" in err.value.msg
    assert "refused" in err.value.msg.lower()


def test_check_mode_looks_once_and_does_not_wait():
    start = time.monotonic()
    res = call({"port": free_port(), "timeout_s": 30}, check=True)
    assert time.monotonic() - start < 1 and res["satisfied"] is False and "would wait up to 30" in res["msg"]


# ---------------------------------------------------------------- paths


def test_waits_for_a_path_to_appear_and_to_go(tmp_path):
    p = tmp_path / "ready"
    later(0.2, p.touch)
    assert call({"path": str(p), "timeout_s": 5})["elapsed_s"] >= 0.15
    later(0.2, p.unlink)
    assert call({"path": str(p), "state": "absent", "timeout_s": 5})["elapsed_s"] >= 0.15


def test_delay_is_waited_before_the_first_look(tmp_path):
    p = tmp_path / "x"
    p.touch()
    assert call({"path": str(p), "delay_s": 0.2})["elapsed_s"] >= 0.2


def test_path_timeout_is_a_clear_failure(tmp_path):
    with pytest.raises(ModuleError, match=r"timed out after 0.2 s .* waiting for .*never to be present: it does not exist"):
        call({"path": str(tmp_path / "never"), "timeout_s": 0.2})


# ---------------------------------------------------------------- regex in a file


def append(path: Path, text: str) -> None:
    with open(path, "a") as fh:
        fh.write(text)


def test_regex_found_in_a_growing_file_with_groups_and_offset(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("INFO starting\n")
    later(0.2, lambda: append(log, "INFO Resolved architecture: Qwen3ForCausalLM\nmore\n"))
    res = call({"path": str(log), "search_regex": r"Resolved architecture: (\w+)", "timeout_s": 5})
    assert res["match"] == "Resolved architecture: Qwen3ForCausalLM" and res["groups"] == ["Qwen3ForCausalLM"]
    assert log.read_bytes()[: res["match_end_offset"]].endswith(b"Qwen3ForCausalLM")


def test_from_offset_ignores_earlier_matches(tmp_path):
    log = tmp_path / "log"
    log.write_text("READY old run\n")
    offset = log.stat().st_size
    later(0.2, lambda: append(log, "READY new run\n"))
    res = call({"path": str(log), "search_regex": "READY (\\w+)", "from_offset": offset, "timeout_s": 5})
    assert res["groups"] == ["new"] and res["elapsed_s"] >= 0.15


def test_a_match_split_across_two_writes_is_found(tmp_path):
    log = tmp_path / "log"
    log.write_text("Application startup ")
    later(0.2, lambda: append(log, "complete.\n"))
    assert call({"path": str(log), "search_regex": "startup complete", "timeout_s": 5, "sleep_s": 0.02})


def test_file_that_does_not_exist_yet_is_waited_for(tmp_path):
    log = tmp_path / "later.log"
    later(0.2, lambda: log.write_text("ok: done\n"))
    assert call({"path": str(log), "search_regex": "^ok:", "timeout_s": 5})["match"] == "ok:"


def test_rotated_file_is_read_again_from_its_start(tmp_path):
    log = tmp_path / "log"
    log.write_text("x" * 5000 + "\n")

    def rotate():
        os.rename(log, tmp_path / "log.1")
        log.write_text("fresh READY\n")

    later(0.2, rotate)
    assert call({"path": str(log), "search_regex": "READY", "timeout_s": 5})["match"] == "READY"


def test_regex_timeout_quotes_the_last_lines_read(tmp_path):
    log = tmp_path / "log"
    log.write_text("".join(f"line {i}\n" for i in range(20)) + "ERROR EngineCore failed to start\n")
    with pytest.raises(ModuleError) as err:
        call({"path": str(log), "search_regex": "Application startup complete", "timeout_s": 0.2})
    assert "to contain a match for 'Application startup complete'" in err.value.msg
    assert "EngineCore failed to start" in err.value.msg and "line 0\n" not in err.value.msg


def test_cli_waits_and_prints_json(tmp_path):
    log = tmp_path / "log"
    log.write_text("hello world\n")
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"path": str(log), "search_regex": "w(or)ld", "timeout_s": 2}))
    proc = subprocess.run([sys.executable, "-m", "library.wait_for", str(args)], cwd=ROOT, capture_output=True, text=True)
    res = json.loads(proc.stdout)
    assert proc.returncode == 0 and res["groups"] == ["or"] and res["changed"] is False


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "args, words",
    [
        ({}, "exactly one of 'port'"),
        ({"port": 80, "path": "/x"}, "exactly one of 'port'"),
        ({"port": 80, "search_regex": "x"}, "search_regex needs 'path'"),
        ({"port": 80, "state": "present"}, "state must be started or stopped"),
        ({"port": 70000}, "out of range"),
        ({"path": "/x", "state": "started"}, "state must be present or absent"),
        ({"path": "/x", "search_regex": "x", "state": "absent"}, "state must be present"),
        ({"path": "/x", "search_regex": "(unclosed"}, "not a valid regex"),
        ({"path": "/x", "timeout_s": -1}, "timeout_s is -1"),
        ({"path": "/x", "search_regex": "x", "from_offset": -5}, "from_offset is -5"),
    ],
)
def test_bad_input_gives_a_clear_error(args, words):
    with pytest.raises(ModuleError, match=words.replace("(", r"\(")):
        call(args)


def test_search_regex_on_a_directory_is_refused(tmp_path):
    with pytest.raises(ModuleError, match="is a directory"):
        call({"path": str(tmp_path), "search_regex": "x", "timeout_s": 1})
