"""The alerts column of `invoke status --group` (dfp_cli/monitoring/fleet.py) against real HTTP servers on loopback
that answer as a broken or slow Prometheus would: each says why in one line, within its deadline, and only firing
alerts with a host label count. (tests/cli/test_fleet_status.py asks a real Prometheus.)"""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from dfp_cli.monitoring.fleet import firing_by_host, shown_url


class Answer(http.server.BaseHTTPRequestHandler):
    body = b""
    trickle_s = 0.0

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        for i in range(len(self.body)):
            self.wfile.write(self.body[i:i + 1] if self.trickle_s else self.body[i:])
            if not self.trickle_s:
                break
            self.wfile.flush()
            time.sleep(self.trickle_s)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    """A real HTTP server whose answer the test sets: (url, handler class)."""
    handler = type("H", (Answer,), {})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()
    httpd.server_close()


def alert(name: str, state: str, **labels: str) -> dict:
    return {"labels": {"alertname": name, **labels}, "state": state}


def test_only_firing_alerts_with_a_host_count(server):
    url, handler = server
    handler.body = json.dumps({"status": "success", "data": {"alerts": [
        alert("B", "firing", host="h1"), alert("A", "firing", host="h1"), alert("C", "pending", host="h2"),
        alert("D", "firing")]}}).encode()
    assert firing_by_host(url) == ({"h1": ["A", "B"]}, None)


@pytest.mark.parametrize("body", [b"<html>not prometheus</html>", b'{"status": "error"}', b"[1, 2]"])
def test_an_answer_that_is_not_prometheus_alerts_is_said(server, body):
    url, handler = server
    handler.body = body
    found, why = firing_by_host(url)
    assert found is None and why == f"Prometheus at {url} answered /api/v1/alerts without a list of alerts"


def test_a_trickling_answer_is_cut_at_the_deadline(server):
    url, handler = server
    handler.body, handler.trickle_s = b" " * 100, 0.2  # 20 s in all, a byte every 0.2 s: no socket timeout fires
    began = time.monotonic()
    found, why = firing_by_host(url, deadline_s=1.0)
    assert found is None and "no whole answer within 1 s" in (why or "") and time.monotonic() - began < 3


def test_not_http_and_a_password_in_the_url():
    assert firing_by_host("file:///etc/passwd") == (
        None, "prometheus_url 'file:///etc/passwd' is not an http(s) URL (e.g. http://prometheus:9090)")
    assert shown_url("http://me:s3cret@prom.example:9090/x?token=1") == "http://prom.example:9090/x"


def test_a_hosts_answer_of_the_wrong_shape_prints_as_unknown_never_a_traceback():
    """What a host returns is data: strings where numbers belong, a schedule of the wrong shape."""
    from dfp_cli.monitoring.fleet import add_alerts, line_of, row_of
    from tests.monitoring.helpers import launch, record, registered

    bad_launch = {**launch(), "speculative": {"num_speculative_tokens": "3; rm -rf /",
                                              "num_speculative_tokens_per_batch_size": [[1, 8], "x"]}}
    reg = registered("10.0.0.1", {**record({1: "pays"}), "last": {"acceptance_rate": "high", "comparison": {}}},
                     bad_launch)
    report = {"running": True, "provisioned": True, "health": "ok", "acceptance_rate": "0.9", "gpu_used_mib": "lots",
              "speed": {"schedule": "every"}}
    row = row_of("h1", reg, report, "gpu")
    add_alerts([row], None)
    assert (row["k"], row["schedule"], row["acceptance_rate"], row["gpu_used_mib"]) == (None, None, None, None)
    assert line_of(row) == ("h1: RUNNING  ready  serves qwen (target aaaaaaaaaaaa, drafter bbbbbbbbbbbb)  acceptance n/a"
                            "  loads: not measured  k=?  GPU n/a  alerts: no prometheus_url set in the inventory")
