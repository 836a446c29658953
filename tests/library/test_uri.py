"""library/uri.py against a real HTTP server (http.server in a thread on 127.0.0.1:0)."""

from __future__ import annotations

import base64
import gzip
import http.server
import json
import subprocess
import sys
import threading
import time

import pytest
from _helpers import ROOT, ReplyingHandler, load_module, run_module

from dflash_host.module import ModuleError

uri = load_module("uri")


class Handler(ReplyingHandler):
    seen: list = []

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
        elif self.path.startswith("/redirect/"):  # /redirect/CODE -> /echo
            self._reply(int(self.path.rsplit("/", 1)[1]), b"", extra={"Location": "/echo"})
        elif self.path == "/to-file":
            self._reply(302, b"", extra={"Location": "file:///etc/passwd"})
        elif self.path == "/auth":  # basic auth u / pw: a 401 challenge without it
            if self.headers.get("Authorization") == "Basic " + base64.b64encode(b"u:s3cret-pw").decode():
                self._reply(200, json.dumps({"user": "u", "echo": "s3cret-pw"}).encode(), "application/json")
            else:
                self._reply(401, b"who are you", extra={"WWW-Authenticate": 'Basic realm="t"'})
        elif self.path == "/gzip":
            self._reply(200, gzip.compress(b"unzipped text"), extra={"Content-Encoding": "gzip"})
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


def test_user_and_password_in_the_url_are_masked_as_ansible_masks_them():
    assert uri.mask_url("http://u:pw@h:8000/x") == "http://****:****@h:8000/x"
    assert uri.mask_url("http://u@h/x") == "http://****@h/x"
    assert uri.mask_url("http://h/x") == "http://h/x"


@pytest.mark.parametrize(
    "body, encoded",
    [
        ({"a": "1", "b": "x y"}, "a=1&b=x+y"),
        ({"k": ["1", "2"], "none": None}, "k=1&k=2"),
        ([["a", "1"], ["a", "2"]], "a=1&a=2"),
        ("already=encoded", "already=encoded"),
    ],
)
def test_form_urlencoded_table(body, encoded):
    assert uri.form_urlencoded(body) == encoded


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
    assert err.value.msg.startswith("Status code was 503 and not [200]: HTTP Error 503: Service Unavailable; body starts:")
    assert "EngineCore failed to start" in err.value.msg and err.value.data["status"] == 503


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
    assert json.loads(res["json"]["body"]) == {"prompt": "hi", "max_tokens": 4} and "content" in res
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
    assert res["headers"]["X-Api-Key"] == "<redacted>" and res["x_api_key"] == "<redacted>"
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
    with pytest.raises(ModuleError, match=r"^Status code was -1 and not \[200\]: Connection failure: timed out; no "
                       r"answer within 0.2 s \(timeout\)"):
        call({"url": f"{server}/slow", "timeout_s": 0.2})
    assert time.monotonic() - start < 1


def test_connection_refused_is_a_clear_failure():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(ModuleError, match=r"^Status code was -1 and not \[200\]: Request failed: <urlopen error "
                       r".*Connection refused>; is the server running"):
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
        ({"url": "http://h/", "body": {"a": 1}}, "body_format is raw"),
        ({"url": "http://h/", "body": 5, "body_format": "form-urlencoded"}, "expect list or dict"),
        ({"url": "http://h/", "json": "text"}, "'json' must be a mapping or a list"),
        ({"url": "http://h/", "status_code": "ok"}, "status_code must be an int"),
        ({"url": "http://h/", "status_code": 42}, "not an HTTP status"),
        ({"url": "http://h/", "method": "GET /x"}, "Parameter 'method' needs to be a single word"),
    ],
)
def test_bad_input_gives_a_clear_error(args, words):
    with pytest.raises(ModuleError, match=words):
        call(args)


# ---------------------------------------------------------------- Ansible's options and fields


def test_ansible_fields_on_success(server):
    res = call({"url": f"{server}/v1/models"})
    assert res["msg"].startswith("OK (") and res["msg"] == f"OK ({res['content_length']} bytes)"
    assert res["content_type"] == "application/json" and res["redirected"] is False and res["elapsed"] == 0
    assert res["json"]["data"][0]["id"] == "target" and "content" not in res  # json with a JSON type, as Ansible
    assert res["url"] == f"{server}/v1/models" and res["status"] == 200


def test_json_is_left_out_for_a_text_answer(server):
    res = call({"url": f"{server}/text", "return_content": True})
    assert "json" not in res and res["content"] == "plain text, not json"


@pytest.mark.parametrize(
    "args, body, ctype",
    [
        ({"body": {"a": [1, 2]}, "body_format": "json"}, {"a": [1, 2]}, "application/json"),
        ({"body": '{"pre": "formatted"}', "body_format": "json"}, {"pre": "formatted"}, "application/json"),
        ({"body": {"a": "1", "b": ["x", "y z"]}, "body_format": "form-urlencoded"}, "a=1&b=x&b=y+z",
         "application/x-www-form-urlencoded"),
        ({"body": "raw text"}, "raw text", "application/x-www-form-urlencoded"),  # urllib's default, Ansible's too
        ({"body": {"a": 1}, "body_format": "json", "headers": {"content-type": "application/vnd+json"}}, {"a": 1},
         "application/vnd+json"),
    ],
)
def test_body_formats_encode_and_set_the_content_type(server, args, body, ctype):
    res = call({"url": f"{server}/echo", "method": "POST", **args})
    sent = res["json"]
    assert (json.loads(sent["body"]) if isinstance(body, dict) else sent["body"]) == body
    assert {k.lower(): v for k, v in sent["headers"].items()}.get("content-type") == ctype


def test_status_code_list_and_the_msg_of_an_accepted_error(server):
    res = call({"url": f"{server}/status/404", "status_code": [200, 404]})
    assert res["status"] == 404 and res["msg"] == "HTTP Error 404: Not Found"


@pytest.mark.parametrize(
    "follow, method, code, status, redirected",
    [
        ("safe", "GET", 302, 200, True),
        ("safe", "POST", 302, 302, False),  # safe follows GET and HEAD only
        ("all", "POST", 302, 200, True),  # and a 302 turns the POST into a GET
        ("all", "POST", 307, 200, True),  # a 307 keeps it
        ("none", "GET", 301, 301, False),
        ("urllib2", "GET", 303, 200, True),
    ],
)
def test_follow_redirects(server, follow, method, code, status, redirected):
    res = call({"url": f"{server}/redirect/{code}", "method": method, "follow_redirects": follow, "body": "b",
                "status_code": [200, 301, 302]})
    assert (res["status"], res["redirected"]) == (status, redirected)
    if status == 200:
        assert res["url"] == f"{server}/echo"
        assert res["json"]["method"] == ("POST" if code == 307 else "GET" if method == "POST" else method)
        assert res["json"]["body"] == ("b" if code == 307 else "")
    else:
        assert res["location"] == f"{server}/echo"  # made absolute, as Ansible's


def test_a_redirect_to_another_scheme_is_not_followed(server):
    res = call({"url": f"{server}/to-file", "follow_redirects": "all", "status_code": 302})
    assert res["status"] == 302 and res["location"] == "file:///etc/passwd"


@pytest.mark.parametrize("force", [False, True])
def test_basic_auth_after_the_challenge_or_at_once(server, force):
    res = call({"url": f"{server}/auth", "url_username": "u", "password": "s3cret-pw", "force_basic_auth": force})
    assert res["status"] == 200 and res["json"]["user"] == "u"
    assert [h.get("Authorization") is not None for _m, _p, h, _b in Handler.seen] == ([True] if force else [False, True])
    assert "s3cret-pw" not in json.dumps(res) and res["json"]["echo"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"  # as Ansible's no_log
    assert res["request_headers"].get("Authorization") in (None, "<redacted>")


def test_credentials_in_the_url_are_used_and_masked(server):
    host = server.removeprefix("http://")
    res = call({"url": f"http://u:s3cret-pw@{host}/auth"})
    assert res["status"] == 200 and "s3cret-pw" not in json.dumps(res) and res["url"] == f"{server}/auth"


def test_a_wrong_password_fails_without_showing_it(server):
    with pytest.raises(ModuleError) as err:
        call({"url": f"{server}/auth", "user": "u", "url_password": "wrong-pw-123", "force_basic_auth": True})
    assert err.value.msg.startswith("Status code was 401 and not [200]: HTTP Error 401: Unauthorized")
    assert "wrong-pw-123" not in err.value.msg + json.dumps(err.value.data)


def test_alias_and_option_with_different_values_are_refused():
    with pytest.raises(ModuleError, match="'url_username' and 'user'"):
        call({"url": "http://h/", "url_username": "a", "user": "b"})


def test_creates_and_removes_skip_the_request_as_ansibles(server, tmp_path):
    (tmp_path / "there").touch()
    res = call({"url": f"{server}/echo", "creates": str(tmp_path / "there")})
    said = f"skipped, since '{tmp_path / 'there'}' exists"
    assert res == {"changed": False, "stdout": said, "stdout_lines": [said], "msg": said}
    assert call({"url": f"{server}/echo", "removes": str(tmp_path / "gone")})["stdout"].endswith("does not exist")
    assert Handler.seen == []
    assert call({"url": f"{server}/echo", "creates": str(tmp_path / "gone")})["status"] == 200


def test_agent_no_cache_and_gzip(server):
    res = call({"url": f"{server}/gzip", "force": True, "return_content": True})
    assert res["content"] == "unzipped text" and res["content_encoding"] == "gzip"
    sent = Handler.seen[0][2]
    assert sent["User-Agent"] == "ansible-httpget" and sent["Cache-Control"] == "no-cache"
    assert call({"url": f"{server}/gzip", "decompress": False, "http_agent": "me"})["status"] == 200
    assert Handler.seen[1][2]["User-Agent"] == "me"


def test_unredirected_headers_are_not_sent_on_after_a_redirect(server):
    call({"url": f"{server}/redirect/302", "headers": {"X-Once": "1", "X-Always": "2"},
          "unredirected_headers": ["x-once"]})
    first, second = Handler.seen[0][2], Handler.seen[1][2]
    assert first["X-Once"] == "1" and "X-Once" not in second and second["X-Always"] == "2"
