"""copy/template `src:` built from what a host returned is data: it may only name a file inside the playbook's
and role's folders; a path the playbook (or a variable file) writes stays the playbook's word."""

from __future__ import annotations

import http.server
import threading

import pytest
import yaml

from engine.api import run_playbook

INV = {"all": {"hosts": {"h": {"ansible_connection": "local"}}}}


def run(tmp_path, tasks, vars=None):
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "vars": vars or {}, "tasks": tasks}]))
    return run_playbook(str(book), inventory=INV)


@pytest.mark.ssh
@pytest.mark.parametrize("module", ["copy", "template"])
@pytest.mark.parametrize("answer", ["../../../../../../etc/hostname", "/etc/hostname"])
def test_a_src_from_a_hosts_answer_cannot_leave_the_playbooks_folders(tmp_path, ssh_host, inventory_file, shared_tmp,
                                                                     module, answer):
    dest = shared_tmp / "out"
    inv = inventory_file(hosts=[ssh_host], host_vars={ssh_host.name: {"dfp_root": str(shared_tmp / "root")}})
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "ask", "command": {"argv": ["echo", answer]}, "register": "where"},
        {"name": "upload", module: {"src": "{{ where.stdout }}", "dest": str(dest)}},
        {"name": "upload here", module: {"src": "{{ where.stdout }}", "dest": str(dest)}, "delegate_to": "localhost"},
    ]}]))
    res = run_playbook(str(book), inventory=str(inv))
    upload = res.find("upload", ssh_host.name)[0]
    assert upload.status == "failed" and "comes from what a host returned" in upload.msg, upload.msg
    assert not dest.exists()


@pytest.mark.parametrize("module", ["copy", "template"])
def test_the_control_nodes_own_answer_names_any_file(tmp_path, module):
    """A local host is the control node: what it answered is its own word, as a path the playbook wrote."""
    source = tmp_path / "elsewhere.txt"
    source.write_text("mine\n")
    dest = tmp_path / "out"
    res = run(tmp_path, [
        {"name": "ask", "command": {"argv": ["echo", str(source)]}, "register": "where"},
        {"name": "upload", module: {"src": "{{ where.stdout }}", "dest": str(dest)}},
    ])
    assert res.exit_code == 0, [t["msg"] for t in res.tasks]
    assert dest.read_text() == "mine\n"


def test_what_the_control_node_fetched_from_elsewhere_is_still_data(tmp_path):
    """uri on the control node brings another machine's word: it never names a file there."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        dest = tmp_path / "out"
        res = run(tmp_path, [
            {"name": "ask", "uri": {"url": f"http://127.0.0.1:{server.server_port}/", "return_content": True},
             "register": "where"},
            {"name": "upload", "copy": {"src": "{{ where.content | trim }}", "dest": str(dest)}},
        ])
    finally:
        server.shutdown()
    upload = res.find("upload", "h")[0]
    assert upload.status == "failed" and "built from what the network (uri on h) returned" in upload.msg, upload.msg
    assert not dest.exists()


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        body = b"/etc/hostname\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_paths_the_playbook_writes_still_work(tmp_path):
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "inside.txt").write_text("inside\n")
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("outside\n")
    res = run(tmp_path, [
        {"name": "ask", "command": {"argv": ["echo", "inside.txt"]}, "register": "name"},
        {"name": "literal", "copy": {"src": str(outside), "dest": str(tmp_path / "a")}},
        {"name": "from a variable", "copy": {"src": "{{ my_file }}", "dest": str(tmp_path / "b")}},
        {"name": "from the host, inside", "copy": {"src": "{{ name.stdout | trim }}", "dest": str(tmp_path / "c")}},
    ], vars={"my_file": str(outside)})
    assert res.exit_code == 0, [t["msg"] for t in res.tasks]
    assert (tmp_path / "a").read_text() == (tmp_path / "b").read_text() == "outside\n"
    assert (tmp_path / "c").read_text() == "inside\n"
