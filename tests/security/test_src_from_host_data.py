"""copy/template `src:` built from what a host returned is data: it may only name a file inside the playbook's
and role's folders; a path the playbook (or a variable file) writes stays the playbook's word."""

from __future__ import annotations

import pytest
import yaml

from engine.api import run_playbook

INV = {"all": {"hosts": {"h": {"ansible_connection": "local"}}}}


def run(tmp_path, tasks, vars=None):
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "vars": vars or {}, "tasks": tasks}]))
    return run_playbook(str(book), inventory=INV)


@pytest.mark.parametrize("module", ["copy", "template"])
@pytest.mark.parametrize("answer", ["../../../../../../etc/hostname", "/etc/hostname"])
def test_a_src_from_a_hosts_answer_cannot_leave_the_playbooks_folders(tmp_path, module, answer):
    dest = tmp_path / "out"
    res = run(tmp_path, [
        {"name": "ask", "command": {"argv": ["echo", answer]}, "register": "where"},
        {"name": "upload", module: {"src": "{{ where.stdout }}", "dest": str(dest)}},
    ])
    upload = res.find("upload", "h")[0]
    assert upload.status == "failed" and "comes from what a host returned" in upload.msg, upload.msg
    assert not dest.exists()


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
