"""library/uri.py against a real HTTP server (http.server in a thread on 127.0.0.1:0)."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time

import pytest
from _helpers import ROOT, load_module, run_module

from dflash_host.module import ModuleError

uri = load_module("uri")


class Handler(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def log_message(self, *args):
        pass

    def _reply(self, code: int, body: bytes, ctype: str = "text/plain", extra: dict | None = None):
        try:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the timeout test)

    def _handle(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        Handler.seen.append((self.command, self.path, dict(self.headers), body))
        if self.path == "/health":
            self._reply(200, b"")
        elif self.path == "/v1/models":
            doc = {"object": "list", "data": [{"id": "target", "max_model_len": 512}], "ready": True}
            self._reply(200, json.dumps(doc).encode(), "application/json", {"X-Api-Key": "server-secret"})
        elif self.path.startswith("/status/"):
            self._reply(int(self.path.rsplit("/", 1)[1]), b"EngineCore failed to start")
        elif self.path == "/echo":
            doc = {"method": self.command, "headers": dict(self.headers), "body": body}
            self._reply(200, json.dumps(doc).encode(), "application/json")
        elif self.path == "/slow":
            time.sleep(1.0)
            self._reply(200, b"late")
        elif self.path == "/big":
            self._reply(200, b"x" * (uri.CONTENT_LIMIT + 10))
        else:
            self._reply(200, b"plain text, not json")

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(autouse=True)
def clear_seen():
    Handler.seen.clear()


def call(args: dict, check: bool = False) -> dict:
    return run_module(uri, args, check=check)


# ---------------------------------------------------------------- pure decisions


@pytest.mark.parametrize(
    "doc, expected, problems",
    [
        ({"a": 1}, {"a": 1}, []),
        ({"a": {"b": [5, {"c": "x"}]}}, {"a.b.1.c": "x", "a.b.0": 5}, []),
        ({"data": [{"id": "t"}]}, {"data.-1.id": "t"}, []),
        ({"a": 1}, {"b": 1}, ["b is missing"]),
        ({"a": 1}, {"a": 2}, ["a is 1, expected 2"]),
        ({"a": True}, {"a": 1}, ["a is true, expected 1"]),
        ({"a": [1]}, {"a.3": 1}, ["a.3 is missing"]),
        ([{"id": "x"}], {"0.id": "x"}, []),
    ],
)
def test_json_problems_table(doc, expected, problems):
    assert uri.json_problems(doc, expected) == problems


@pytest.mark.parametrize(
    "name, secret",
    [
        ("Authorization", True),
        ("X-Api-Key", True),
        ("x-auth-token", True),
        ("Cookie", True),
        ("Content-Type", False),
        ("Accept", False),
        ("Keep-Alive", False),
    ],
)
def test_secret_headers_table(name, secret):
    assert uri.is_secret_header(name) is secret


@pytest.mark.parametrize(
    "value, codes",
    [(200, [200]), ([200, "204"], [200, 204]), ("503", [503])],
)
def test_status_codes_accept_ints_strings_and_lists(value, codes):
    assert uri.parse_status_codes(value) == codes


def test_password_in_the_url_is_redacted():
    assert uri.redact_url("http://u:pw@h:8000/x") == "http://u:<redacted>@h:8000/x"
    assert uri.redact_url("http://h/x") == "http://h/x"


# ---------------------------------------------------------------- behaviour


def test_health_check_ok_and_never_changed(server):
    res = call({"url": f"{server}/health"})
    assert res["status"] == 200 and res["changed"] is False and "content" not in res


def test_expect_json_passes_on_the_served_model(server):
    res = call(
        {
            "url": f"{server}/v1/models",
            "expect_json": {"data.0.id": "target", "ready": True},
            "return_content": True,
        }
    )
    assert res["json"]["data"][0]["id"] == "target" and res["changed"] is False


def test_expect_json_mismatch_fails_naming_key_and_values(server):
    with pytest.raises(ModuleError) as err:
        call({"url": f"{server}/v1/models", "expect_json": {"data.0.id": "other", "missing.key": 1}})
    assert 'data.0.id is "target", expected "other"' in err.value.msg and "missing.key is missing" in err.value.msg


def test_expect_json_on_a_text_answer_fails_clearly(server):
    with pytest.raises(ModuleError, match="body is not JSON.*plain text"):
        call({"url": f"{server}/text", "expect_json": {"a": 1}})


def test_unexpected_status_fails_quoting_the_body(server):
    with pytest.raises(ModuleError) as err:
        call({"url": f"{server}/status/503"})
    assert "answered 503, expected 200" in err.value.msg and "EngineCore failed to start" in err.value.msg
    assert err.value.data["status"] == 503


def test_listed_error_status_is_accepted(server):
    assert call({"url": f"{server}/status/404", "status_code": [200, 404]})["status"] == 404


def test_post_json_sends_body_and_content_type_and_is_not_a_change(server):
    res = call(
        {
            "url": f"{server}/echo",
            "method": "post",
            "json": {"prompt": "hi", "max_tokens": 4},
            "return_content": True,
        }
    )
    assert res["changed"] is False and res["method"] == "POST"
    assert json.loads(res["json"]["body"]) == {"prompt": "hi", "max_tokens": 4}
    assert res["json"]["headers"]["Content-Type"] == "application/json"


def test_mutating_request_is_changed_and_not_sent_in_check_mode(server):
    args = {"url": f"{server}/echo", "method": "PUT", "body": "x", "mutating": True}
    res = call(args, check=True)
    assert res["changed"] is True and "would send PUT" in res["msg"] and Handler.seen == []
    assert call(args)["changed"] is True and len(Handler.seen) == 1


def test_read_only_requests_are_sent_in_check_mode(server):
    assert call({"url": f"{server}/health"}, check=True)["status"] == 200 and len(Handler.seen) == 1
    assert call({"url": f"{server}/echo", "method": "POST", "body": "smoke"}, check=True)["changed"] is False


def test_mutating_flag_does_not_make_a_get_a_change(server):
    assert call({"url": f"{server}/health", "mutating": True})["changed"] is False


def test_secret_headers_are_sent_but_never_echoed(server):
    res = call({"url": f"{server}/v1/models", "headers": {"Authorization": "Bearer s3cret", "X-Trace": "t1"}})
    sent = Handler.seen[0][2]
    assert sent["Authorization"] == "Bearer s3cret"
    assert res["request_headers"] == {"Authorization": "<redacted>", "X-Trace": "t1"}
    assert res["headers"]["X-Api-Key"] == "<redacted>"
    assert "s3cret" not in json.dumps(res) and "server-secret" not in json.dumps(res)


def test_secret_never_appears_in_a_failure(server):
    with pytest.raises(ModuleError) as err:
        call({"url": f"{server}/status/500", "headers": {"X-Auth-Token": "tok123"}})
    assert "tok123" not in err.value.msg and "tok123" not in json.dumps(err.value.data)


def test_head_request_has_no_body(server):
    assert call({"url": f"{server}/health", "method": "HEAD", "return_content": True})["content"] == ""


def test_big_answer_is_cut_with_a_note(server):
    res = call({"url": f"{server}/big", "return_content": True})
    assert len(res["content"]) == uri.CONTENT_LIMIT and res["content_truncated_bytes"] == 10


def test_timeout_is_a_clear_failure(server):
    start = time.monotonic()
    with pytest.raises(ModuleError, match=r"no answer within 0.2 s \(timeout_s\)"):
        call({"url": f"{server}/slow", "timeout_s": 0.2})
    assert time.monotonic() - start < 1


def test_connection_refused_is_a_clear_failure():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(ModuleError, match="cannot connect.*is the server running"):
        call({"url": f"http://127.0.0.1:{port}/health", "timeout_s": 2})


def test_cli_prints_the_result(server, tmp_path):
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"url": f"{server}/v1/models", "expect_json": {"data.0.id": "target"}}))
    proc = subprocess.run([sys.executable, "-m", "library.uri", str(args), "--check"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["status"] == 200


@pytest.mark.parametrize(
    "args, words",
    [
        ({"url": "ftp://h/x"}, "not an http:// or https:// URL"),
        ({"url": "localhost:8000/health"}, "not an http:// or https:// URL"),
        ({"url": "http://h/", "body": "a", "json": {"a": 1}}, "either 'body'"),
        ({"url": "http://h/", "json": "text"}, "'json' must be a mapping or a list"),
        ({"url": "http://h/", "status_code": "ok"}, "status_code must be an int"),
        ({"url": "http://h/", "status_code": 42}, "not an HTTP status"),
        ({"url": "http://h/", "method": "GET /x"}, "not an HTTP method"),
    ],
)
def test_bad_input_gives_a_clear_error(args, words):
    with pytest.raises(ModuleError, match=words):
        call(args)
