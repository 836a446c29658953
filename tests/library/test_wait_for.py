"""library/wait_for.py: real sockets, real files written by a thread while the module waits."""

from __future__ import annotations

import json
import os
import re
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
    assert err.value.msg.startswith(f"Timeout when waiting for 127.0.0.1:{port} (waited ")
    assert "of timeout 0.3 s" in err.value.msg and "refused" in err.value.msg.lower()
    assert err.value.data["elapsed"] == 0


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
    with pytest.raises(ModuleError, match=r"^Timeout when waiting for file .*never \(waited .* of timeout 0.2 s: it does "
                       r"not exist\)$"):
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
    assert err.value.msg.startswith(f"Timeout when waiting for search string Application startup complete in {log} (")
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
        ({"port": 80, "path": "/x"}, "port and path parameter can not both be passed to wait_for"),
        ({"port": 80, "search_regex": "x", "state": "stopped"}, "with state stopped it would be ignored"),
        ({"port": 70000}, "out of range"),
        ({"path": "/x", "state": "stopped"}, "state=stopped should only be used for checking a port"),
        ({"path": "/x", "state": "drained"}, "state=drained should only be used for checking a port"),
        ({"state": "drained"}, "state=drained needs port"),
        ({"port": 80, "exclude_hosts": ["10.0.0.1"]}, "exclude_hosts should only be with state=drained"),
        ({"port": 80, "state": "drained", "active_connection_states": ["LISTEN"]},
         "unknown active_connection_state (LISTEN) defined"),
        ({"path": "/x", "search_regex": "x", "state": "absent"}, "with state absent it would be ignored"),
        ({"path": "/x", "search_regex": "(unclosed"}, "Invalid regular expression: missing )"),
        ({"path": "/x", "timeout_s": -1}, "timeout is -1"),
        ({"path": "/x", "search_regex": "x", "from_offset": -5}, "from_offset is -5"),
        ({"path": "/x", "from_offset": 5}, "from_offset needs path and search_regex"),
    ],
)
def test_bad_input_gives_a_clear_error(args, words):
    with pytest.raises(ModuleError, match=re.escape(words)):
        call(args)


def test_search_regex_on_a_directory_is_refused(tmp_path):
    with pytest.raises(ModuleError, match="is a directory"):
        call({"path": str(tmp_path), "search_regex": "x", "timeout_s": 1})


# ---------------------------------------------------------------- Ansible's options and fields


def test_ansible_fields_and_names(tmp_path):
    log = tmp_path / "log"
    log.write_text("model=qwen port=8000\n")
    res = call({"path": str(log), "search_regex": r"model=(?P<model>\w+) port=(\d+)", "timeout": 2, "delay": 0,
                "sleep": 0.05})
    assert res["match_groups"] == ["qwen", "8000"] and res["match_groupdict"] == {"model": "qwen"}
    assert {k: res[k] for k in ("state", "port", "path", "search_regex", "elapsed")} == {
        "state": "file", "port": None, "path": str(log), "search_regex": r"model=(?P<model>\w+) port=(\d+)",
        "elapsed": 0}


def test_port_states_present_and_absent_mean_started_and_stopped():
    with listener() as s:
        assert call({"port": s.getsockname()[1], "state": "present", "timeout": 2})["state"] == "present"
    assert call({"port": free_port(), "state": "absent", "timeout": 2})["state"] == "absent"


def test_msg_replaces_the_timeout_message():
    with pytest.raises(ModuleError) as err:
        call({"port": free_port(), "timeout": 0.2, "msg": "the server never came up"})
    assert err.value.msg == "the server never came up"


def test_neither_port_nor_path_sleeps_for_timeout():
    start = time.monotonic()
    res = call({"timeout": 0.3, "delay": 0.1})
    assert 0.35 <= time.monotonic() - start < 2 and res["state"] == "started" and res["port"] is None
    assert call({"timeout": 30}, check=True)["msg"] == "check mode: a real run would sleep 30.0 s"


def test_timeout_counts_from_the_start_delay_included(tmp_path):
    start = time.monotonic()
    with pytest.raises(ModuleError, match="Timeout when waiting for file"):
        call({"path": str(tmp_path / "never"), "delay": 0.3, "timeout": 0.4})
    assert time.monotonic() - start < 0.9


def test_a_dangling_link_is_not_present_and_counts_as_absent(tmp_path):
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    assert call({"path": str(tmp_path / "link"), "state": "absent", "timeout": 1})["elapsed"] == 0
    with pytest.raises(ModuleError, match="Timeout when waiting for file"):
        call({"path": str(tmp_path / "link"), "timeout": 0.2})


def test_a_path_under_a_file_fails_at_once_with_ansibles_words(tmp_path):
    (tmp_path / "f").write_text("x")
    start = time.monotonic()
    with pytest.raises(ModuleError, match=f"^Failed to stat {tmp_path}/f/child, Not a directory$"):
        call({"path": str(tmp_path / "f" / "child"), "timeout": 5})
    assert time.monotonic() - start < 1


def banner_server(banner: bytes, delay: float = 0.0) -> socket.socket:
    """A listener that sends banner to every connection (after delay) and closes it."""
    s = listener()

    def serve():
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            with conn:
                time.sleep(delay)
                try:
                    conn.sendall(banner)
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    return s


def test_search_regex_on_a_port_reads_what_it_sends():
    with banner_server(b"SSH-2.0-OpenSSH_9.6\r\n", delay=0.1) as s:
        port = s.getsockname()[1]
        res = call({"port": port, "search_regex": "OpenSSH", "timeout": 3})
        assert res["search_regex"] == "OpenSSH" and res["match_groups"] == []
    # The failure names what the last whole look found, so the timeout must leave room for one: a connection, a
    # thread's accept and 21 bytes on loopback take milliseconds, but seconds on a busy 2-core machine (0.5 s
    # was too short there: "waited 0.503 s of timeout 0.5 s: no match in 0 bytes read"). The wait is the timeout.
    with banner_server(b"SSH-2.0-OpenSSH_9.6\r\n") as s:
        port = s.getsockname()[1]
        with pytest.raises(ModuleError) as err:
            call({"port": port, "search_regex": "nginx", "timeout": 5})
    assert err.value.msg.startswith(f"Timeout when waiting for search string nginx in 127.0.0.1:{port} (")
    assert "closed the connection after 21 bytes without a match" in err.value.msg


def test_drained_waits_for_the_connections_to_end():
    server = listener()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    try:
        with pytest.raises(ModuleError) as err:
            call({"port": port, "state": "drained", "timeout": 0.3})
        assert err.value.msg.startswith(f"Timeout when waiting for 127.0.0.1:{port} to drain (")
        assert "1 connection(s) left" in err.value.msg
        assert call({"port": port, "state": "drained", "timeout": 1, "exclude_hosts": ["127.0.0.1"]})["state"] == "drained"

        def close():
            client.close()  # the client first: its side keeps the TIME_WAIT, not the server's port
            time.sleep(0.1)
            accepted.close()

        later(0.3, close)
        assert call({"port": port, "state": "drained", "timeout": 5})["elapsed_s"] >= 0.25
    finally:
        client.close()
        accepted.close()
        server.close()
