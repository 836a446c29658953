"""get_url (library/get_url.py) against real ansible-core's: the same sequence of tasks run by ansible-playbook and
by us (`ansible_connection: local`), each side into its own folder, from one http.server on 127.0.0.1 serving
the same files; compared per task: failed, changed, msg, and every field Ansible returns (its temp `src` and the
backup's name aside), folders written as <dir>. Then the files each side left."""

from __future__ import annotations

import hashlib
import http.server
import os
import threading
from pathlib import Path

import pytest
from _ansible_side import placed, registered_by_ansible, registered_by_ours, same_flags

from tests.helpers import required_ansible_tool

DATA = b"hello from the server\n" * 50
OTHER = b"other\n"
SHA256 = hashlib.sha256(DATA).hexdigest()

# id, task ("@": the side's folder, "U": the server's base URL)
SEQUENCE = [
    ("new", {"get_url": {"url": "U/a.txt", "dest": "@/a.txt"}}),
    ("again-not-modified", {"get_url": {"url": "U/a.txt", "dest": "@/a.txt"}}),
    ("forced-same", {"get_url": {"url": "U/a.txt", "dest": "@/a.txt", "force": True}}),
    ("into-folder", {"get_url": {"url": "U/a.txt", "dest": "@/sub"}}),
    ("check-new", {"get_url": {"url": "U/a.txt", "dest": "@/c.txt"}, "check_mode": True}),
    ("checksum-there", {"get_url": {"url": "U/a.txt", "dest": "@/a.txt", "checksum": f"sha256:{SHA256}"}}),
    ("checksum-there-mode", {"get_url": {"url": "U/a.txt", "dest": "@/a.txt", "checksum": f"sha256:{SHA256}",
                                         "mode": "0600"}}),
    ("checksum-new", {"get_url": {"url": "U/a.txt", "dest": "@/d.txt", "checksum": f"sha256:{SHA256}"}}),
    ("checksum-wrong", {"get_url": {"url": "U/a.txt", "dest": "@/e.txt", "checksum": "sha256:" + "0" * 64}}),
    ("checksum-url", {"get_url": {"url": "U/a.txt", "dest": "@/f.txt", "checksum": "sha256:U/SHA256SUMS"}}),
    ("checksum-url-missing-name", {"get_url": {"url": "U/other.txt", "dest": "@/g.txt",
                                               "checksum": "sha256:U/SHA256SUMS"}}),
    ("checksum-no-colon", {"get_url": {"url": "U/a.txt", "dest": "@/h.txt", "checksum": "abc"}}),
    ("checksum-not-hex", {"get_url": {"url": "U/a.txt", "dest": "@/h.txt", "checksum": "sha256:xyz"}}),
    ("replace-backup", {"get_url": {"url": "U/other.txt", "dest": "@/a.txt", "force": True, "backup": True}}),
    ("missing-404", {"get_url": {"url": "U/nope.txt", "dest": "@/n.txt"}}),
    ("refused", {"get_url": {"url": "http://127.0.0.1:9/x", "dest": "@/n.txt"}}),
    ("dest-folder-missing", {"get_url": {"url": "U/a.txt", "dest": "@/no/such/x.txt"}}),
    ("credentials-masked", {"get_url": {"url": "U/a.txt", "dest": "@/m.txt", "url_username": "u",
                                        "url_password": "s3cret-pw", "force_basic_auth": True}}),
    ("tmp-dest-missing", {"get_url": {"url": "U/a.txt", "dest": "@/t.txt", "tmp_dest": "@/nope"}}),
]
SIDE_FREE = {"src", "backup_file", "invocation", "exception", "changed", "failed", "msg", "elapsed"}


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test's output stays clean
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    (root / "a.txt").write_bytes(DATA)
    (root / "other.txt").write_bytes(OTHER)
    (root / "SHA256SUMS").write_text(f"{SHA256}  a.txt\n")
    old = 1577934245
    for p in root.iterdir():
        os.utime(p, (old, old))
    handler = lambda *a, **kw: Quiet(*a, directory=str(root), **kw)  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _task(task, folder: Path, base: str):
    return placed(task, {"@": str(folder), "U/": base + "/"})


@pytest.fixture(scope="module")
def both(tmp_path_factory, server):
    work = tmp_path_factory.mktemp("get_url")
    for side in ("ansible", "ours"):
        (work / side / "sub").mkdir(parents=True)
    (work / "home").mkdir()
    theirs = registered_by_ansible(required_ansible_tool("ansible-playbook"), work / "home", work,
                                   [(cid, _task(t, work / "ansible", server)) for cid, t in SEQUENCE])
    return work, theirs, registered_by_ours(work / "ours.yaml",
                                            [(cid, _task(t, work / "ours", server)) for cid, t in SEQUENCE])


def _scrub(value, work: Path, side: str):
    if isinstance(value, str):
        return value.replace(str(work / side), "<dir>")
    if isinstance(value, dict):
        return {k: _scrub(v, work, side) for k, v in value.items()}
    return value


@pytest.mark.parametrize("cid", [c[0] for c in SEQUENCE])
def test_get_url_as_ansibles(both, cid):
    work, theirs, ours = both
    t, o = _scrub(theirs[cid], work, "ansible"), _scrub(ours[cid], work, "ours")
    same_flags(t, o, "failed", "changed")
    if cid == "refused":
        assert o["msg"].startswith("Request failed: <urlopen error"), o
    elif cid == "checksum-wrong":
        assert o["msg"].split(" did not match ")[1] == t["msg"].split(" did not match ")[1], (t, o)
    else:
        assert o.get("msg") == t.get("msg"), (t, o)
    keys = set(t) - SIDE_FREE - {k for k in t if k.startswith("_ansible")}
    assert keys <= set(o), (sorted(keys - set(o)), t, o)
    for k in keys:
        assert o[k] == t[k], (k, t, o)
    assert ("backup_file" in o) == ("backup_file" in t)
    assert "s3cret-pw" not in str(ours[cid])


def test_files_left_alike(both):
    work, _theirs, _ours = both

    def tree(side):
        root = work / side
        return {str(p.relative_to(root)): (p.read_bytes(), oct(p.stat().st_mode & 0o777)) for p in root.rglob("*")
                if p.is_file() and not p.name.endswith("~")}
    assert tree("ours") == tree("ansible")
