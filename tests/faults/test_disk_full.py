"""A full disk while a config is written: the drafter's config.json, a copy with content, a template and
a copy of a control-node file each fail with one clear paragraph (the path, that the disk is full, the
fix), the old file stays byte for byte, and nothing is left beside it (no temp file, no backup).

The disk is a real 64 KiB tmpfs (the tests run as root), filled up by a real file; the tasks run
through the engine on `local`. Last, the tool's own state: the pidfile's folder on a full disk when
a server is started.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from make_checkpoint import TINY_TARGET_CONFIG, drafter_tensors
from safetensors.numpy import save_file

from tests.fakes.served import PLAYBOOKS, SERVICE, START, alive_servers, msgs, paths_of, result_of, server_vars
from tests.fakes.vllm_processes import kill_leftovers
from tests.helpers import play

OLD = "old contents: must survive a failed write\n"


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs at tmp_path/disk; fill() uses up every free block with a file named `filler`."""
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {exc}")

    def fill() -> None:
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(fd)
        assert os.statvfs(disk).f_bavail == 0

    try:
        yield disk, fill
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def failed_cleanly(res, task: str, dest: Path, old: bytes, words: tuple = ("cannot write", "not enough space")) -> str:
    """Exit 2, one paragraph naming the path and the full disk, the old bytes, nothing beside them."""
    assert res.exit_code == 2, msgs(res)
    [r] = [r for r in res.results if r.task == task]
    assert r.status == "failed" and "exception" not in r.result, r.result  # a clear error, not a crash
    assert str(dest) in r.msg and "no space left on device" in r.msg.lower(), r.msg
    assert all(w in r.msg for w in words), r.msg
    assert dest.read_bytes() == old
    assert sorted(os.listdir(dest.parent)) == sorted([dest.name, "filler"]), "a temp file or backup was left"
    return r.msg


def test_drafter_config_on_a_full_disk_keeps_the_old_config(tmp_path, small_disk, inventory_file):
    disk, fill = small_disk
    drafter, target = tmp_path / "dflash", tmp_path / "target"
    drafter.mkdir()
    target.mkdir()
    table = drafter_tensors(hidden=64, layers=1, heads=4, kv_heads=2, head_dim=32, intermediate=128, k=2, dtype="F32")
    save_file({n: np.zeros(s, dtype=np.float32) for n, (_, s) in table.items()}, str(drafter / "model.safetensors"))
    (target / "config.json").write_text(json.dumps(TINY_TARGET_CONFIG))
    dest = disk / "config.json"
    book = "- hosts: all\n  gather_facts: false\n  pre_tasks: [{import_role: {name: common, tasks_from: variables}}]\n  roles: [drafter-config]\n"
    inv = inventory_file(
        local=True,
        vars={"drafter_model": str(drafter), "target_model": str(target), "drafter_config_dest": str(dest)},
    )
    first = play(book, inv, tmp_path, extra_vars={"drafter_mask_token_id": 3})
    assert first.exit_code == 0 and json.loads(dest.read_text())["dflash_config"]["mask_token_id"] == 3, msgs(first)
    old = dest.read_bytes()
    fill()
    res = play(book, inv, tmp_path, extra_vars={"drafter_mask_token_id": 5})  # a change: config.json is rewritten
    failed_cleanly(res, "Write the drafter's config.json from its weights' header and the target's config", dest, old)


@pytest.mark.parametrize("how", ["copy content", "template"])
def test_copy_and_template_on_a_full_disk_keep_the_old_file(tmp_path, small_disk, inventory_file, how):
    disk, fill = small_disk
    dest = disk / "app.conf"
    dest.write_text(OLD)
    fill()
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "app.conf.j2").write_text("{{ line }}\n" * 2000)  # 2000 lines: 8 KiB, never fits
    task = (
        f'copy: {{dest: "{dest}", content: "{{{{ line * 400 }}}}", backup: true}}'
        if how == "copy content"
        else f'template: {{src: app.conf.j2, dest: "{dest}", backup: true}}'
    )
    book = f"- hosts: all\n  gather_facts: false\n  vars: {{line: new contents}}\n  tasks:\n    - name: write it\n      {task}\n"
    res = play(book, inventory_file(local=True), tmp_path)
    failed_cleanly(res, "write it", dest, OLD.encode())


def test_copying_a_control_node_file_onto_a_full_disk_keeps_the_old_file(tmp_path, small_disk, inventory_file):
    disk, fill = small_disk
    dest = disk / "app.conf"
    dest.write_text(OLD)
    fill()
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "app.conf").write_bytes(os.urandom(16384))
    book = f'- hosts: all\n  gather_facts: false\n  tasks:\n    - name: write it\n      copy: {{src: app.conf, dest: "{dest}"}}\n'
    res = play(book, inventory_file(local=True), tmp_path)
    failed_cleanly(res, "write it", dest, OLD.encode(), words=())


def test_a_full_disk_under_the_pidfile_fails_the_start_and_leaves_no_server(tmp_path, small_disk, inventory_file):
    disk, fill = small_disk
    hv = server_vars(tmp_path / "host")
    p = paths_of(hv)
    p["pidfile"].parent.mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(disk), str(p["pidfile"].parent)], check=True)  # run/ is the small disk
    inv = inventory_file(local=True, host_vars={"local": hv})
    stop = "- hosts: all\n  pre_tasks: [{import_role: {name: common, tasks_from: variables}}]\n  tasks:\n    - vllm_server: {state: stopped, pidfile: '{{ vllm_pidfile }}'}\n"
    try:
        first = play(SERVICE, inv, tmp_path)  # launch files written while there is room
        assert first.exit_code == 0, msgs(first)
        assert play(stop, inv, tmp_path).exit_code == 0 and not p["pidfile"].exists()
        fill()
        res = play(SERVICE, inv, tmp_path)
        assert res.exit_code == 2, msgs(res)
        failed = result_of(res, START, "local")
        assert "exception" not in failed and "no space left on device" in failed["msg"].lower(), failed
        assert alive_servers(p["logs"]) == {}, "a server runs that no pidfile records"
    finally:
        play(PLAYBOOKS / "teardown.yaml", inv, tmp_path)
        kill_leftovers([p["logs"]])
        subprocess.run(["umount", "-l", str(p["pidfile"].parent)], check=False)
