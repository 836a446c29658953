"""library/uri.py against real ansible-core's ansible.builtin.uri, on the same requests to one real HTTP server
(http.server in a thread of this test, on 127.0.0.1): JSON and plain answers, a +json type, HEAD, bodies as JSON,
form-urlencoded and raw, status codes accepted or not, redirects under each follow_redirects, a redirect ending
in a 404, basic auth after a challenge and at once, a password the server echoes, creates/removes, gzip, the
User-Agent and no-cache, unredirected headers, a timeout and a refused connection.

Ansible's side is one ansible-playbook run (a looped task over the cases, tests/library/_ansible_side.py); ours
is `python3 -m library.uri ARGS.json [--check]` from the repository root per case. Compared: status, url,
redirected, elapsed, json, content, stdout, every response header field (content_type, content_length,
location, server, ...; date only present on both, it is the second it was sent), changed, failed, and the
field names themselves, less ANSIBLE_ONLY and OURS_ONLY (each with why). msg: Ansible's exactly on a success
("OK (N bytes)", "HTTP Error 404: Not Found"); on a failure ours starts with Ansible's words and goes on.
Where we differ on purpose DIFFERENCES says what each side does. The last tests run an Ansible-written
playbook with ours, and check that an option ours does not have is refused when the playbook loads.
"""

from __future__ import annotations

import base64
import gzip
import http.server
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from _ansible_side import fields, run_ansible, run_ours
from _helpers import ReplyingHandler

PASSWORD = "s3cret-pw"  # noqa: S105 - the test server's
AUTH = "Basic " + base64.b64encode(f"u:{PASSWORD}".encode()).decode()


class Handler(ReplyingHandler):
    def version_string(self):
        return "dfp-test-server"  # not the python version: the same on both sides anyway, but short

    def _handle(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        path = self.path
        if path == "/json":
            self._reply(200, json.dumps({"a": 1, "list": [1, "two"]}).encode(), "application/json; charset=utf-8")
        elif path == "/vnd":
            self._reply(200, b'{"data": {"id": "x"}}', "application/vnd.api+json")
        elif path == "/json-as-text":
            self._reply(200, b'{"not": "parsed"}', "text/plain")
        elif path == "/text":
            self._reply(200, b"hello\nworld\n")
        elif path == "/no-type":
            self._reply(200, b"untyped", None)
        elif path == "/echo":
            doc = {"method": self.command, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
            self._reply(200, json.dumps(doc, sort_keys=True).encode(), "application/json")
        elif path.startswith("/status/"):
            self._reply(int(path.rsplit("/", 1)[1]), b"the body of an error")
        elif path.startswith("/redirect/"):  # /redirect/CODE -> /echo (relative, as servers write it)
            self._reply(int(path.rsplit("/", 1)[1]), b"", extra={"Location": "/echo"})
        elif path == "/redirect-to-404":
            self._reply(302, b"", extra={"Location": "/status/404"})
        elif path == "/auth":
            if self.headers.get("Authorization") == AUTH:
                self._reply(200, json.dumps({"user": "u", "echo": PASSWORD}).encode(), "application/json")
            else:
                self._reply(401, b"who are you", extra={"WWW-Authenticate": 'Basic realm="test"'})
        elif path == "/gzip":
            self._reply(200, gzip.compress(b"unzipped text"), extra={"Content-Encoding": "gzip"})
        elif path == "/headers":
            self._reply(200, b"{}", "application/json", {"X-Request-Id": "r-1", "X-Multi-Word-Header": "v"})
        elif path == "/cookie":
            self._reply(200, b"ok", extra={"Set-Cookie": "session=abc123; Path=/"})
        elif path == "/slow":
            time.sleep(2.5)
            self._reply(200, b"late")
        else:
            self._reply(404, b"no such endpoint")

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _handle


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# id, the arguments ("@/x": the server's URL with path /x; "@dir/NAME": a path in the case folder), flags
CASES = [
    ("get-json", {"url": "@/json"}),
    ("get-json-return-content", {"url": "@/json", "return_content": True}),
    ("get-plus-json-type", {"url": "@/vnd"}),
    ("json-body-as-text-type", {"url": "@/json-as-text", "return_content": True}),
    ("get-text-return-content", {"url": "@/text", "return_content": True}),
    ("no-content-type", {"url": "@/no-type", "return_content": True}),
    ("head", {"url": "@/json", "method": "HEAD", "return_content": True}),
    ("post-json-mapping", {"url": "@/echo", "method": "POST", "body": {"k": [1, 2], "s": "x"}, "body_format": "json"}),
    ("post-json-text", {"url": "@/echo", "method": "POST", "body": '{"pre": "formatted"}', "body_format": "json"}),
    ("post-json-own-content-type", {"url": "@/echo", "method": "POST", "body": {"a": 1}, "body_format": "json",
                                    "headers": {"content-type": "application/vnd.x+json"}}),
    ("post-form-mapping", {"url": "@/echo", "method": "POST", "body": {"a": "1", "b": ["x", "y z"], "n": None},
                           "body_format": "form-urlencoded"}),
    ("post-form-pairs", {"url": "@/echo", "method": "POST", "body": [["a", "1"], ["a", "2"]],
                         "body_format": "form-urlencoded"}),
    ("post-raw-method-lowercase", {"url": "@/echo", "method": "patch", "body": "raw text"}),
    ("headers-agent-no-cache", {"url": "@/echo", "headers": {"X-Custom": "1", "Accept": "application/json"},
                                "http_agent": "my-agent/1.0", "force": True}),
    ("response-headers", {"url": "@/headers"}),
    ("status-404-fails", {"url": "@/status/404"}),
    ("status-404-fails-return-content", {"url": "@/status/404", "return_content": True}),
    ("status-404-accepted", {"url": "@/status/404", "status_code": [200, 404]}),
    ("status-code-int", {"url": "@/status/201", "status_code": 201}),
    ("status-codes-as-text", {"url": "@/status/500", "method": "POST", "body": "x", "status_code": ["200", "204"]}),
    ("status-200-not-accepted", {"url": "@/json", "status_code": [201, 202]}),
    ("redirect-safe-get", {"url": "@/redirect/302"}),
    ("redirect-safe-head", {"url": "@/redirect/301", "method": "HEAD"}),
    ("redirect-safe-post", {"url": "@/redirect/302", "method": "POST", "body": "b", "status_code": 302}),
    ("redirect-all-post-302", {"url": "@/redirect/302", "method": "POST", "body": "b", "follow_redirects": "all"}),
    ("redirect-all-post-301", {"url": "@/redirect/301", "method": "POST", "body": "b", "follow_redirects": "all"}),
    ("redirect-all-put-303", {"url": "@/redirect/303", "method": "PUT", "body": "b", "follow_redirects": "all"}),
    ("redirect-all-post-307", {"url": "@/redirect/307", "method": "POST", "body": "b", "follow_redirects": "all"}),
    ("redirect-none", {"url": "@/redirect/301", "follow_redirects": "none", "status_code": [301]}),
    ("redirect-urllib2", {"url": "@/redirect/302", "follow_redirects": "urllib2"}),
    ("redirect-urllib2-post", {"url": "@/redirect/302", "method": "POST", "body": "b", "follow_redirects": "urllib2"}),
    ("redirect-to-404", {"url": "@/redirect-to-404", "status_code": [404]}),
    ("unredirected-headers", {"url": "@/redirect/302", "headers": {"X-Once": "1", "X-Always": "2"},
                              "unredirected_headers": ["x-once"]}),
    ("auth-after-challenge", {"url": "@/auth", "url_username": "u", "url_password": PASSWORD}),
    ("auth-forced-aliases", {"url": "@/auth", "user": "u", "password": PASSWORD, "force_basic_auth": True}),
    ("auth-missing", {"url": "@/auth"}),
    ("auth-wrong-password", {"url": "@/auth", "user": "u", "password": "wrong-pw-123", "force_basic_auth": True}),
    ("gzip", {"url": "@/gzip", "return_content": True}),
    ("creates-skips", {"url": "@/echo", "creates": "@dir/there"}),
    ("creates-runs", {"url": "@/echo", "creates": "@dir/absent"}),
    ("removes-skips", {"url": "@/echo", "removes": "@dir/absent"}),
    ("timeout", {"url": "@/slow", "timeout": 1}),
    ("connection-refused", {"url": "http://127.0.0.1:@refused/x"}),
    # refused by both
    ("method-two-words", {"url": "@/json", "method": "GET /x"}),
]
SAME_WORDS = {"method-two-words"}  # a refusal where ours starts with Ansible's msg

# Fields one side has that the other lacks, on purpose
ANSIBLE_ONLY = {
    "cookies": "the cookies the server set: secrets; ours never returns them (set_cookie is <redacted>)",
    "cookies_string": "the same cookies as one Cookie header's text",
}
OURS_ONLY = {
    "method": "the method sent", "headers": "the response's headers as sent (secret ones <redacted>)",
    "request_headers": "the request's headers (secret ones <redacted>)", "elapsed_s": "elapsed as a float",
}
VARIES = {"date"}  # the second the server answered: present on both

# Where we differ on purpose: id, the arguments, what Ansible does, what ours does ({"failed": words}: a failure
# whose msg holds the words; {"field": value}: a success with these fields)
DIFFERENCES = [
    # Ansible's uri does not run in check mode (skipped); ours sends a read-only request (mutating: false)
    ("check-mode-get", {"url": "@/json"}, "check", {"skipped": True}, {"status": 200, "json": {"a": 1, "list": [1, "two"]}}),
    # a mapping body with body_format raw: Ansible hands the dict to urllib, which fails; ours says how to encode it
    ("mapping-body-raw", {"url": "@/echo", "method": "POST", "body": {"a": 1}}, "",
     {"failed": "Status code was -1"}, {"failed": "set body_format: json"}),
    # a URL without a scheme: both refuse, ours with its own words
    ("no-scheme", {"url": "127.0.0.1:@refused/x"}, "", {"failed": "unknown url type"},
     {"failed": "is not an http:// or https:// URL"}),
    # a cookie the server sets: Ansible returns it (set_cookie, cookies, cookies_string); ours redacts the header
    ("set-cookie", {"url": "@/cookie"}, "", {"set_cookie": "session=abc123; Path=/", "cookies": {"session": "abc123"}},
     {"set_cookie": "<redacted>"}),
]


def _fill(value, base: str, folder, refused: int):
    if isinstance(value, str):
        if value.startswith("@dir/"):
            return str(folder / value[5:])
        if value.startswith("@/"):
            return base + value[1:]
        return value.replace("@refused", str(refused))
    if isinstance(value, dict):
        return {k: _fill(v, base, folder, refused) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict:
    """{case id: (Ansible's result, ours)}: one ansible-playbook run for all the cases, then ours, on one server."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        work = tmp_path_factory.mktemp("uri-vs-ansible")
        folder = work / "files"
        folder.mkdir()
        (folder / "there").write_text("x")
        base, refused = f"http://127.0.0.1:{httpd.server_address[1]}", _free_port()
        every = [(cid, args, "") for cid, args in CASES] + [(cid, args, flags) for cid, args, flags, _a, _o in DIFFERENCES]
        filled = [(cid, _fill(args, base, folder, refused), flags) for cid, args, flags in every]
        with ThreadPoolExecutor(3) as pool:  # ours beside Ansible's run: the server and the files do not change
            ours = pool.map(lambda case: run_ours("uri", work, *case), filled)
            theirs, _printed = run_ansible(work, "uri", filled)
            return {cid: (theirs[cid], mine) for (cid, _a, _f), mine in zip(filled, ours)}
    finally:
        httpd.shutdown()
        httpd.server_close()


def _keys(result: dict, drop: dict) -> set:
    return {k for k in fields(result) if k not in drop and k not in ("elapsed", "skipped")}


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_uri_returns_what_ansibles_returns(both, cid):
    theirs, ours = both[cid]
    assert bool(ours["failed"]) == bool(theirs.get("failed")), (theirs, ours)
    assert ours["changed"] is False and theirs["changed"] is False
    assert _keys(theirs, ANSIBLE_ONLY) == _keys(ours, OURS_ONLY), (theirs, ours)
    for key in _keys(theirs, ANSIBLE_ONLY) - VARIES:
        assert ours[key] == theirs[key], f"{key}: ours {ours[key]!r}, Ansible's {theirs[key]!r}"
    assert ours.get("elapsed") == theirs.get("elapsed")
    if cid in SAME_WORDS or theirs.get("failed"):
        assert ours["msg"].startswith(theirs["msg"]) and len(ours["msg"]) > len(theirs["msg"]), (theirs["msg"], ours["msg"])
    elif "msg" in theirs:
        assert ours["msg"] == theirs["msg"]
    else:  # creates/removes: Ansible says it in stdout only, ours in msg too
        assert ours["msg"] == theirs["stdout"]


@pytest.mark.parametrize("cid, ansible_does, we_do", [(c[0], c[3], c[4]) for c in DIFFERENCES],
                         ids=[c[0] for c in DIFFERENCES])
def test_where_we_differ_on_purpose(both, cid, ansible_does, we_do):
    for result, expected, who in ((both[cid][0], ansible_does, "Ansible"), (both[cid][1], we_do, "ours")):
        if "failed" in expected:
            assert result.get("failed") and expected["failed"] in result["msg"], (
                f"{who}: {result}: compare again and update DIFFERENCES")
        else:
            assert not result.get("failed"), (who, result)
            assert {k: result.get(k) for k in expected} == expected, (who, result)


def test_the_cases_cover_what_the_brief_names(both):
    """JSON and plain answers, a redirect followed and not, a 404, basic auth; and the password never shown."""
    ours = {cid: o for cid, (_t, o) in both.items()}
    assert ours["get-json"]["json"] == {"a": 1, "list": [1, "two"]} and ours["get-json"]["msg"].startswith("OK (")
    assert ours["get-text-return-content"]["content"] == "hello\nworld\n" and "json" not in ours["get-text-return-content"]
    assert ours["redirect-safe-get"]["redirected"] and ours["redirect-safe-get"]["json"]["method"] == "GET"
    assert ours["redirect-none"]["status"] == 301 and ours["redirect-none"]["location"].endswith("/echo")
    assert ours["status-404-fails"]["failed"] and ours["status-404-fails"]["status"] == 404
    assert ours["auth-after-challenge"]["json"] == {"user": "u", "echo": "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"}
    assert ours["auth-forced-aliases"]["status"] == 200 and ours["auth-missing"]["status"] == 401
    assert ours["redirect-all-post-307"]["json"]["body"] == "b"
    for cid, (theirs, mine) in both.items():
        assert PASSWORD not in json.dumps(mine) and "wrong-pw-123" not in json.dumps(mine), cid
        assert PASSWORD not in json.dumps(fields(theirs)), cid  # Ansible masks it too (no_log)


# ---------------------------------------------------------------- a playbook written for Ansible, run by ours


class _Health(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps({"data": [{"id": "target"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_playbook_written_for_ansible_runs_with_ours(tmp_path):
    from engine.api import run_playbook

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1/models"
        tasks = [
            {"name": "models", "ansible.builtin.uri": {"url": url, "timeout": 5, "status_code": [200],
                                                        "return_content": True}, "register": "models"},
            {"name": "read it", "assert": {"that": [
                "models.status == 200", "models.json.data[0].id == 'target'", "models.content_type == 'application/json'",
                "models.msg.startswith('OK (')", "not models.redirected", "models is not changed"]}},
        ]
        book = tmp_path / "pb.yaml"
        book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
        inv = tmp_path / "inv.yaml"
        inv.write_text(yaml.safe_dump({"all": {"hosts": {"h": {"ansible_connection": "local"}}}}))
        res = run_playbook(str(book), str(inv))
        assert res.exit_code == 0, [(t["task"], t["msg"]) for t in res.tasks if t["status"] == "failed"]
        assert res.registered["h"]["models"]["json"] == {"data": [{"id": "target"}]}
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("option, value", [("dest", "/tmp/x"), ("src", "/tmp/x"), ("unix_socket", "/tmp/s"),
                                           ("ca_path", "/tmp/ca.pem"), ("client_cert", "/tmp/c.pem")])
def test_an_option_ours_does_not_have_is_refused_when_the_playbook_loads(tmp_path, option, value):
    from engine.api import run_playbook

    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "get", "uri": {"url": "http://127.0.0.1:1/", option: value}}]}]))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h": {"ansible_connection": "local"}}}}))
    res = run_playbook(str(book), str(inv))
    assert res.exit_code == 4 and f"module 'uri' has no argument(s) {option}" in res.error


def test_an_unsupported_body_format_is_refused_when_the_playbook_loads(tmp_path):
    from engine.api import run_playbook

    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "upload", "uri": {"url": "http://127.0.0.1:1/", "body_format": "form-multipart", "body": {}}}]}]))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h": {"ansible_connection": "local"}}}}))
    res = run_playbook(str(book), str(inv))
    assert res.exit_code == 4 and "'body_format' is 'form-multipart'; choose one of" in res.error
