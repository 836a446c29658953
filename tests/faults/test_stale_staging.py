"""An upload cut short between upload and install leaves dest/.dfp-staging: the next run removes it when it is
provably the engine's (0700, this user, only sha256-named files), and leaves anything else alone."""

from __future__ import annotations

import hashlib
import os

import yaml

from engine.api import run_playbook


def push(tmp_path, src, dest):
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "push", "copy": {"src": f"{src}/", "dest": str(dest)}}]}]))  # the folder's content into dest
    return run_playbook(str(book), inventory={"all": {"hosts": {"h": {"ansible_connection": "local"}}}})


def test_a_stale_staging_folder_is_removed_and_a_foreign_one_kept(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    (src / "a.txt").write_text("a\n")
    assert push(tmp_path, src, dest).exit_code == 0
    stage = dest / ".dfp-staging"
    stage.mkdir(mode=0o700)
    os.chmod(stage, 0o700)
    (stage / hashlib.sha256(b"x").hexdigest()).write_bytes(b"x")
    res = push(tmp_path, src, dest)
    assert res.exit_code == 0 and not stage.exists()
    assert any(".dfp-staging" in w for w in res.find("push", "h")[0].result.get("warnings", []))

    stage.mkdir(mode=0o755)
    os.chmod(stage, 0o755)
    (stage / "notes.txt").write_text("mine")
    assert push(tmp_path, src, dest).exit_code == 0
    assert (stage / "notes.txt").read_text() == "mine"
