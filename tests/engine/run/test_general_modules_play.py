"""Every general module in one playbook, over local and a real sshd: run twice (second run changed=0),
and check mode changes nothing on the host. A real HTTP server answers uri and wait_for port."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
from pathlib import Path

import pytest
import yaml

from engine.api import run_playbook

APP_ENV = "PORT=8000\nMODEL=target\n"
APP_SHA = hashlib.sha256(APP_ENV.encode()).hexdigest()


class _Health(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps({"data": [{"id": "target"}]}).encode() if self.path == "/v1/models" else b""
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def http_port():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


TASKS = [
    # beside base, in a folder that exists: copy makes no missing folder (Ansible's), not even in check mode
    {"name": "Write the app's env file", "copy": {"dest": "{{ app_env }}", "content": APP_ENV, "mode": "0640"}},
    {"name": "Push the scripts folder", "copy": {"src": "scripts/", "dest": "{{ base }}/scripts"}},  # its content
    {
        "name": "Set the log level line",
        "lineinfile": {"path": "{{ base }}/conf/extra.env", "line": "LOG=info", "regexp": "^LOG=", "create": True},
    },
    {"name": "Build once", "command": {"argv": ["touch", "{{ base }}/built"], "creates": "{{ base }}/built"}},
    {
        "name": "Read the env file",
        "command": {"argv": ["cat", "{{ base }}/conf/extra.env"], "check_safe": True},
        "register": "env_text",
        "changed_when": False,
        "failed_when": "env_text.rc not in [0, 1]",  # in check mode the file may not exist yet
    },
    {"name": "Look at the env file", "stat": {"path": "{{ app_env }}", "checksum_algorithm": "sha256"},
     "register": "st"},
    {
        "name": "The env file holds what was written",
        "when": "not ansible_check_mode",
        "assert": {"that": ["st.stat.exists", "st.stat.mode == '0640'", "'LOG=info' in env_text.stdout",
                            f"st.stat.checksum == '{APP_SHA}'", f"st.sha256 == '{APP_SHA}'"]},
    },
    {"name": "Wait for the build marker", "wait_for": {"path": "{{ base }}/built", "timeout_s": 5}},
    {
        "name": "Wait for the port line",
        "wait_for": {"path": "{{ app_env }}", "search_regex": "^PORT=(\\d+)", "timeout_s": 5},
    },
    {"name": "Wait for the health server", "wait_for": {"port": "{{ http_port }}", "timeout_s": 5}},
    {
        "name": "Ask for the served models",
        "uri": {"url": "http://127.0.0.1:{{ http_port }}/v1/models", "expect_json": {"data.0.id": "target"}},
    },
]


def write_play(tmp_path: Path, base: Path, http_port: int) -> Path:
    scripts = tmp_path / "files" / "scripts"
    (scripts / "lib").mkdir(parents=True)
    (scripts / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(scripts / "run.sh", 0o755)
    (scripts / "lib" / "__init__.py").write_text("")
    (scripts / "__init__.py").write_text("")  # same content as another file: one shared upload
    play = {"hosts": "all", "gather_facts": False, "vars": {"base": str(base), "app_env": str(base.parent / "app.env"), "http_port": http_port}, "tasks": TASKS}
    path = tmp_path / "general.yaml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path


def snapshot(root: Path) -> dict:
    return {
        str(p.relative_to(root)): (p.lstat().st_mode, p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))
    }


def test_general_modules_are_idempotent_and_check_mode_changes_nothing(target, tmp_path, http_port):
    inv, host_tmp = target
    base = host_tmp / "general"
    pb = write_play(tmp_path, base, http_port)

    dry = run_playbook(pb, inv, check=True, diff=True)
    assert dry.exit_code == 0, [(t["task"], t["msg"]) for t in dry.tasks if t["status"] == "failed"]
    assert snapshot(host_tmp) == {}  # nothing written on the host
    host = next(iter(dry.recap))
    assert dry.recap[host]["changed"] >= 4

    first = run_playbook(pb, inv)
    assert first.exit_code == 0, [(t["task"], t["msg"]) for t in first.tasks if t["status"] == "failed"]
    assert first.recap[host]["changed"] == 4  # env file, scripts, the log line, the build
    assert (base.parent / "app.env").read_text() == APP_ENV
    assert (base / "conf" / "extra.env").read_text() == "LOG=info\n"
    assert os.access(base / "scripts" / "run.sh", os.X_OK) and (base / "scripts" / "lib" / "__init__.py").exists()
    assert not (base / "scripts" / ".dfp-staging").exists()

    before = snapshot(host_tmp)
    second = run_playbook(pb, inv)
    assert second.exit_code == 0 and second.recap[host]["changed"] == 0, [
        (t["task"], t["msg"]) for t in second.tasks if t["changed"]
    ]
    check_again = run_playbook(pb, inv, check=True)
    assert check_again.exit_code == 0 and check_again.recap[host]["changed"] == 0
    assert snapshot(host_tmp) == before


def test_copy_src_restores_a_changed_mode_without_an_upload(inventory_file, shared_tmp, tmp_path):
    inv = inventory_file(local=True)
    (tmp_path / "files" / "tree").mkdir(parents=True)
    (tmp_path / "files" / "tree" / "a.txt").write_text("a\n")
    os.chmod(tmp_path / "files" / "tree" / "a.txt", 0o644)
    play = {
        "hosts": "all",
        "gather_facts": False,
        "tasks": [{"name": "Push the tree", "copy": {"src": "tree/", "dest": str(shared_tmp / "tree")}}],
    }
    pb = tmp_path / "pb.yaml"
    pb.write_text(yaml.safe_dump([play]))
    assert run_playbook(pb, inv).exit_code == 0
    os.chmod(shared_tmp / "tree" / "a.txt", 0o600)
    res = run_playbook(pb, inv)
    assert res.exit_code == 0 and res.recap["local"]["changed"] == 1
    assert (shared_tmp / "tree" / "a.txt").stat().st_mode & 0o777 == 0o644
