"""library/copy.py: one file from content, and a folder through the manifest plan/install protocol."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest
from _helpers import load_module, run_by_hand, run_module, snapshot

from dflash_host.host.manifest import check_manifest, extra_paths, plan_entries
from dflash_host.module import ModuleError

copy_mod = load_module("copy")


def call(args: dict, check: bool = False, diff: bool = False) -> dict:
    return run_module(copy_mod, args, check=check, diff=diff)


def cli(tmp_path: Path, args: dict, *flags: str) -> tuple[int, dict]:
    return run_by_hand("copy", tmp_path, args, *flags)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def mode_of(p: Path) -> int:
    return p.stat().st_mode & 0o7777


# ---------------------------------------------------------------- pure decisions


@pytest.mark.parametrize(
    "dest_before, source, expected",
    [
        (None, b"new\n", {"before": "", "after_header": "D", "after": "new\n"}),
        (b"old\n", b"new\n", {"before_header": "D", "before": "old\n", "after_header": "D", "after": "new\n"}),
        (b"a\x00b", b"text", {"dst_binary": 1, "after_header": "D", "after": "text"}),
        (b"x", b"\x00\x01", {"before_header": "D", "before": "x", "src_binary": 1}),
        (b"x" * (copy_mod.DIFF_LIMIT + 1), b"y" * (copy_mod.DIFF_LIMIT + 1), {"dst_larger": copy_mod.DIFF_LIMIT,
                                                                           "src_larger": copy_mod.DIFF_LIMIT}),
    ],
    ids=["absent", "text", "dest-binary", "content-binary", "both-large"],
)
def test_content_diff_says_what_ansibles_copy_says(tmp_path, dest_before, source, expected):
    dest = tmp_path / "D"
    if dest_before is not None:
        dest.write_bytes(dest_before)
    got = copy_mod.content_diff(str(dest), copy_mod.Source(source, None))
    assert got == {k: str(dest) if v == "D" else v for k, v in expected.items()}


def test_plan_entries_separates_uploads_from_mode_fixes():
    a, b = "a" * 64, "b" * 64
    entries = [
        {"path": "new", "sha256": a, "mode": None},
        {"path": "same", "sha256": a, "mode": 0o644},
        {"path": "differs", "sha256": a, "mode": None},
        {"path": "modeonly", "sha256": a, "mode": 0o755},
    ]
    found = {
        "new": None,
        "same": {"sha256": a, "mode": 0o644},
        "differs": {"sha256": b, "mode": 0o644},
        "modeonly": {"sha256": a, "mode": 0o644},
    }
    assert plan_entries(entries, found) == (["new", "differs"], ["modeonly"])


def test_extra_paths_lists_unlisted_files_sorted():
    assert extra_paths(["z", "a/b", "keep"], ["keep"]) == ["a/b", "z"]


@pytest.mark.parametrize(
    "manifest, words",
    [
        ([{"path": "../x", "sha256": "a" * 64}], "leaves dest"),
        ([{"path": "/etc/x", "sha256": "a" * 64}], "relative to dest"),
        ([{"path": "a/../../x", "sha256": "a" * 64}], "leaves dest"),
        ([{"path": "x", "sha256": "nothex"}], "not 64 hex digits"),
        ([{"path": "x"}], "with 'path' and 'sha256'"),
        ([{"path": "x", "sha256": "a" * 64, "owner": "me"}], "unknown key"),
        ([{"path": "x", "sha256": "a" * 64, "mode": "rw"}], "not an octal number"),
        ([{"path": "x", "sha256": "a" * 64}, {"path": "./x", "sha256": "a" * 64}], "listed twice"),
    ],
)
def test_bad_manifest_is_refused_naming_the_entry(manifest, words):
    with pytest.raises(ModuleError, match=words):
        check_manifest(manifest, None)


def test_manifest_modes_accept_strings_and_ints():
    got = check_manifest(
        [
            {"path": "a/./b", "sha256": "A" * 64, "mode": "0755"},
            {"path": "c", "sha256": "b" * 64, "mode": 0o600},
            {"path": "d", "sha256": "c" * 64},
        ],
        0o640,
    )
    assert got == [
        {"path": "a/b", "sha256": "a" * 64, "mode": 0o755},
        {"path": "c", "sha256": "b" * 64, "mode": 0o600},
        {"path": "d", "sha256": "c" * 64, "mode": 0o640},
    ]


# ---------------------------------------------------------------- one file


def test_cli_creates_the_file_then_reports_no_change(tmp_path):
    dest = tmp_path / "conf" / "app.env"
    dest.parent.mkdir()
    args = {"dest": str(dest), "content": "A=1\n", "mode": "0640"}
    rc, first = cli(tmp_path, args)
    assert rc == 0 and first["changed"] is True and dest.read_text() == "A=1\n" and mode_of(dest) == 0o640
    assert first["sha256"] == sha(b"A=1\n")
    rc, second = cli(tmp_path, args)
    assert rc == 0 and second["changed"] is False and "as wanted" in second["msg"]


def test_check_mode_changes_nothing_and_says_what_would_change(tmp_path):
    dest = tmp_path / "f.txt"
    dest.write_text("old\n")
    os.chmod(dest, 0o644)
    before = snapshot(tmp_path)
    res = call({"dest": str(dest), "content": "new\n", "mode": "0600"}, check=True, diff=True)
    assert res["changed"] is True and f"would update {dest}" in res["msg"]
    assert res["diff"]["before"] == "old\n" and res["diff"]["after"] == "new\n"
    assert snapshot(tmp_path) == before
    mode_only = call({"dest": str(dest), "content": "old\n", "mode": "0600"}, check=True, diff=True)
    assert mode_only["changed"] is True and mode_only["diff"]["after"]["mode"] == "0600"
    assert snapshot(tmp_path) == before
    absent = call({"dest": str(tmp_path / "g"), "content": "x"}, check=True)
    assert absent["changed"] is True and snapshot(tmp_path) == before


def test_diff_shows_before_and_after(tmp_path):
    dest = tmp_path / "f.txt"
    dest.write_text("one\n")
    res = call({"dest": str(dest), "content": "two\n"}, diff=True)
    assert res["diff"] == {"before_header": str(dest), "before": "one\n", "after_header": str(dest), "after": "two\n"}
    created = call({"dest": str(tmp_path / "g"), "content": "x"}, diff=True)
    assert created["diff"]["before"] == "" and "before_header" not in created["diff"]
    assert "diff" not in call({"dest": str(tmp_path / "h"), "content": "x"})  # with --diff only


def test_binary_content_b64_is_written_and_summarised_in_the_diff(tmp_path):
    data = bytes(range(256))
    dest = tmp_path / "blob.bin"
    res = call({"dest": str(dest), "content_b64": base64.b64encode(data).decode()}, diff=True)
    assert dest.read_bytes() == data and res["diff"] == {"before": "", "src_binary": 1}
    assert call({"dest": str(dest), "content_b64": base64.b64encode(data).decode()})["changed"] is False


def test_mode_only_change_keeps_the_file_in_place(tmp_path):
    dest = tmp_path / "f"
    dest.write_text("same")
    os.chmod(dest, 0o644)
    inode = dest.stat().st_ino
    res = call({"dest": str(dest), "content": "same", "mode": "0600"})
    assert res["changed"] is True and "mode" in res["msg"] and mode_of(dest) == 0o600
    assert dest.stat().st_ino == inode


def test_content_change_keeps_existing_mode_and_backup_keeps_the_old_bytes(tmp_path):
    dest = tmp_path / "f"
    dest.write_text("v1")
    os.chmod(dest, 0o600)
    res = call({"dest": str(dest), "content": "v2", "backup": True})
    assert dest.read_text() == "v2" and mode_of(dest) == 0o600
    assert Path(res["backup_file"]).read_text() == "v1"


def test_symlink_dest_is_replaced_by_the_file_unless_follow(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("a")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    res = call({"dest": str(link), "content": "a"})  # the same content: the link is still replaced (Ansible's way)
    assert res["changed"] and not link.is_symlink() and link.read_text() == "a" and real.read_text() == "a"
    link.unlink()
    link.symlink_to(real)
    res = call({"dest": str(link), "content": "b", "follow": True})
    assert link.is_symlink() and real.read_text() == "b" and res["dest"] == str(real)


def test_result_fields_are_ansibles(tmp_path):
    dest = tmp_path / "f.txt"
    res = call({"dest": str(dest), "content": "hi\n", "mode": "u=rw,g=r,o="})
    assert res["checksum"] == hashlib.sha1(b"hi\n").hexdigest()  # noqa: S324 - Ansible's checksum
    assert res["md5sum"] == hashlib.md5(b"hi\n").hexdigest()  # noqa: S324 - Ansible's md5sum
    assert (res["dest"], res["mode"], res["state"], res["size"], res["uid"]) == (str(dest), "0640", "file", 3, os.getuid())
    again = call({"dest": str(dest), "content": "hi\n"})
    assert again["changed"] is False and again["path"] == str(dest) and "md5sum" not in again


def test_force_false_leaves_an_existing_file_alone(tmp_path):
    dest = tmp_path / "f"
    dest.write_text("mine")
    os.chmod(dest, 0o600)
    res = call({"dest": str(dest), "content": "theirs", "mode": "0644", "force": False})
    assert res["changed"] is False and res["msg"] == "file already exists"
    assert dest.read_text() == "mine" and mode_of(dest) == 0o600
    assert call({"dest": str(tmp_path / "g"), "content": "x", "force": False})["changed"] is True


def test_validate_runs_on_the_temp_file_with_dests_extension(tmp_path):
    dest = tmp_path / "app.conf"
    dest.write_text("old")
    with pytest.raises(ModuleError, match="failed to validate"):
        call({"dest": str(dest), "content": "bad", "validate": "grep -q good %s"})
    assert dest.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["app.conf"]
    call({"dest": str(dest), "content": "good", "validate": "sh -c 'case $0 in *.conf) grep -q good $0;; *) exit 3;; esac' %s"})
    assert dest.read_text() == "good"
    with pytest.raises(ModuleError, match="validate must contain %s"):
        call({"dest": str(dest), "content": "good", "validate": "true"})


def test_remote_src_copies_a_file_on_the_host(tmp_path):
    src = tmp_path / "src.txt"
    src.write_text("from the host\n")
    os.chmod(src, 0o750)
    folder = tmp_path / "into"
    folder.mkdir()
    res = call({"dest": str(folder), "src": str(src), "remote_src": True})
    made = folder / "src.txt"
    assert res["changed"] and res["dest"] == str(made) and made.read_text() == "from the host\n"
    assert mode_of(made) == 0o666 & ~umask() and res["src"] == str(src)
    old = tmp_path / "old.txt"
    old.write_text("old")
    call({"dest": str(old), "src": str(src), "remote_src": True})
    assert old.read_text() == "from the host\n" and mode_of(old) == 0o750  # over a file: src's mode, as Ansible's
    assert call({"dest": str(old), "src": str(src), "remote_src": True})["changed"] is False
    preserved = call({"dest": str(tmp_path / "p.txt"), "src": str(src), "remote_src": True, "mode": "preserve"})
    assert preserved["mode"] == "0750"
    with pytest.raises(ModuleError, match="needs remote_src: true"):
        call({"dest": str(old), "src": str(src)})


def test_remote_src_folder_merges_as_ansible(tmp_path):
    """remote_src with a folder: `src/` its content into dest, `src` the folder itself under dest; a second run
    changes nothing, a changed file is replaced, a link stays a link without local_follow (Ansible's copy module)."""
    src = tmp_path / "tree"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub" / "b.txt").write_text("b")
    (src / "empty").mkdir()
    os.symlink("a.txt", src / "link")
    into = call({"src": f"{src}/", "dest": f"{tmp_path}/new/", "remote_src": True, "local_follow": False})
    assert into["changed"] and (tmp_path / "new" / "sub" / "b.txt").read_text() == "b"
    assert (tmp_path / "new" / "empty").is_dir() and os.readlink(tmp_path / "new" / "link") == "a.txt"
    assert call({"src": f"{src}/", "dest": f"{tmp_path}/new/", "remote_src": True})["changed"] is False
    (src / "sub" / "b.txt").write_text("bee")
    assert call({"src": f"{src}/", "dest": f"{tmp_path}/new/", "remote_src": True})["changed"] is True
    assert (tmp_path / "new" / "sub" / "b.txt").read_text() == "bee"
    whole = call({"src": str(src), "dest": str(tmp_path / "new"), "remote_src": True})
    assert whole["changed"] and whole["dest"] == f"{tmp_path}/new/tree" and (tmp_path / "new" / "tree" / "a.txt").exists()
    assert not call({"src": str(src), "dest": str(tmp_path / "new"), "remote_src": True}, check=True)["changed"]


def umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def test_missing_folders_are_made_with_directory_mode_for_a_dest_ending_in_a_slash(tmp_path):
    (tmp_path / "f").write_text("x")
    call({"dest": f"{tmp_path}/a/b/", "src": str(tmp_path / "f"), "remote_src": True, "directory_mode": "0700"})
    assert mode_of(tmp_path / "a") == mode_of(tmp_path / "a" / "b") == 0o700
    assert (tmp_path / "a" / "b" / "f").read_text() == "x"


def test_a_missing_folder_fails_as_ansible_without_a_slash(tmp_path):
    with pytest.raises(ModuleError, match="Destination directory .*/a/b does not exist"):
        call({"dest": str(tmp_path / "a" / "b" / "f"), "content": "x"})
    assert not (tmp_path / "a").exists()


def test_check_mode_counts_a_missing_folder_as_a_change(tmp_path):
    """On a fresh host the task that makes the folder only reports in check mode: the copy after it would write."""
    res = call({"dest": str(tmp_path / "a" / "f"), "content": "x"}, check=True)
    assert res["changed"] and "does not exist yet" in res["msg"], res
    assert not (tmp_path / "a").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")
def test_owner_and_group_are_set_and_then_unchanged(tmp_path):
    dest = tmp_path / "owned"
    args = {"dest": str(dest), "content": "x", "owner": "65534", "group": "65534"}
    assert call(args)["changed"] is True
    assert (dest.stat().st_uid, dest.stat().st_gid) == (65534, 65534)
    assert call(args)["changed"] is False
    os.chown(dest, 0, 0)
    assert "owner" in call(args)["msg"]


@pytest.mark.parametrize(
    "args, words",
    [
        ({}, r"src \(or content\) is required"),
        ({"content": "a", "content_b64": "YQ=="}, "content and content_b64 are mutually exclusive"),
        ({"content_b64": "not base64!"}, "not valid base64"),
        ({"content": "a", "mode": "rw-r--r--"}, "mode must be in octal or symbolic form"),
        ({"content": "a", "mode": "preserve"}, "mode preserve keeps the mode of src"),
        ({"content": "a", "owner": "dfp-no-such-user"}, "chown failed: failed to look up user dfp-no-such-user"),
        ({"content": "a", "group": "dfp-no-such-group"}, "chgrp failed: failed to look up group"),
        ({"content": "a", "checksum": "0" * 40}, "does not match the expected checksum"),
        ({"content": "a", "delete_extra": True}, "only works with 'manifest'"),
        ({"content": "a", "staged": {"a": "/tmp/x"}}, "belongs to folder mode"),
    ],
)
def test_bad_input_gives_a_clear_error_and_writes_nothing(tmp_path, args, words):
    before = snapshot(tmp_path)
    with pytest.raises(ModuleError, match=words):
        call({"dest": str(tmp_path / "f"), **args})
    assert snapshot(tmp_path) == before


def test_dest_that_is_a_directory_is_refused(tmp_path):
    with pytest.raises(ModuleError, match="can not use content with a dir as dest"):
        call({"dest": str(tmp_path), "content": "a"})


# ---------------------------------------------------------------- folder: manifest protocol


def make_source(files: dict) -> list[dict]:
    return [{"path": p, "sha256": sha(d), "mode": m} for p, (d, m) in files.items()]


def stage(tmp_path: Path, files: dict, paths: list[str]) -> dict:
    """What the engine does between plan and install: upload each needed file to a temp path."""
    staging = tmp_path / "staging"
    staging.mkdir(exist_ok=True)
    out = {}
    for i, rel in enumerate(paths):
        tmp = staging / f"up{i}"
        tmp.write_bytes(files[rel][0])
        out[rel] = str(tmp)
    return out


FILES = {
    "a.txt": (b"alpha\n", "0644"),
    "bin/run.sh": (b"#!/bin/sh\necho hi\n", "0755"),
    "deep/er/c.json": (b"{}", "0600"),
}


def test_plan_lists_missing_and_different_files_and_changes_nothing(tmp_path):
    dest = tmp_path / "dest"
    (dest / "bin").mkdir(parents=True)
    (dest / "a.txt").write_bytes(b"alpha\n")
    (dest / "bin" / "run.sh").write_bytes(b"old")
    before = snapshot(tmp_path)
    res = call({"dest": str(dest), "manifest": make_source(FILES), "phase": "plan"})
    assert res["needed"] == ["bin/run.sh", "deep/er/c.json"]
    assert res["changed"] is False and res["would_change"] is True
    assert snapshot(tmp_path) == before


def test_install_places_staged_files_atomically_then_second_run_is_unchanged(tmp_path):
    dest = tmp_path / "dest"
    manifest = make_source(FILES)
    plan = call({"dest": str(dest), "manifest": manifest, "phase": "plan"})
    assert plan["needed"] == sorted(FILES)
    staged = stage(tmp_path, FILES, plan["needed"])
    res = call({"dest": str(dest), "manifest": manifest, "phase": "install", "staged": staged})
    assert res["changed"] is True and sorted(res["installed"]) == sorted(FILES)
    for rel, (data, mode) in FILES.items():
        assert (dest / rel).read_bytes() == data and mode_of(dest / rel) == int(mode, 8)
    assert not any(Path(p).exists() for p in staged.values())  # consumed
    again = call({"dest": str(dest), "manifest": manifest, "phase": "plan"})
    assert again["needed"] == [] and again["would_change"] is False
    second = call({"dest": str(dest), "manifest": manifest, "phase": "install", "staged": {}})
    assert second["changed"] is False


@pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")
def test_install_sets_the_owner_and_group_of_every_file(tmp_path):
    dest = tmp_path / "dest"
    manifest = make_source(FILES)
    args = {"dest": str(dest), "manifest": manifest, "owner": "65534", "group": "65534"}
    plan = call({**args, "phase": "plan"})
    call({**args, "phase": "install", "staged": stage(tmp_path, FILES, plan["needed"])})
    assert {((dest / rel).stat().st_uid, (dest / rel).stat().st_gid) for rel in FILES} == {(65534, 65534)}
    assert call({**args, "phase": "plan"})["owner_changes"] == []
    os.chown(dest / "a.txt", 0, 0)
    assert call({**args, "phase": "plan"})["owner_changes"] == ["a.txt"]


def test_a_manifest_owner_the_host_lacks_is_refused_in_its_own_words(tmp_path):
    with pytest.raises(ModuleError, match="owner 'dfp-no-such-user' does not exist on this host"):
        call({"dest": str(tmp_path / "d"), "manifest": make_source(FILES), "owner": "dfp-no-such-user"})


def test_install_through_the_cli_and_check_mode_changes_nothing(tmp_path):
    dest = tmp_path / "dest"
    manifest = make_source(FILES)
    staged = stage(tmp_path, FILES, sorted(FILES))
    before = snapshot(tmp_path)
    rc, res = cli(tmp_path, {"dest": str(dest), "manifest": manifest, "phase": "install", "staged": staged}, "--check")
    assert rc == 0 and res["changed"] is True and "would install" in res["msg"]
    after = snapshot(tmp_path)
    after.pop("args.json")
    assert after == before
    rc, res = cli(tmp_path, {"dest": str(dest), "manifest": manifest, "phase": "install", "staged": staged})
    assert rc == 0 and res["changed"] is True and (dest / "a.txt").read_bytes() == b"alpha\n"


def test_staged_file_with_wrong_sha256_installs_nothing(tmp_path):
    dest = tmp_path / "dest"
    manifest = make_source(FILES)
    staged = stage(tmp_path, FILES, sorted(FILES))
    Path(staged["a.txt"]).write_bytes(b"tampered")
    with pytest.raises(ModuleError, match=r"a.txt \(staged file .* has sha256 .*nothing was installed"):
        call({"dest": str(dest), "manifest": manifest, "phase": "install", "staged": staged})
    assert not dest.exists()
    assert all(Path(p).exists() for p in staged.values())  # kept for a retry


def test_install_without_a_needed_upload_is_refused(tmp_path):
    with pytest.raises(ModuleError, match="were not staged: a.txt"):
        call(
            {
                "dest": str(tmp_path / "d"),
                "manifest": make_source({"a.txt": (b"x", "0644")}),
                "phase": "install",
            }
        )


def test_mode_only_difference_is_fixed_without_an_upload(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "a.txt").write_bytes(b"alpha\n")
    os.chmod(dest / "a.txt", 0o600)
    manifest = make_source({"a.txt": (b"alpha\n", "0644")})
    plan = call({"dest": str(dest), "manifest": manifest})
    assert plan["needed"] == [] and plan["mode_changes"] == ["a.txt"]
    res = call({"dest": str(dest), "manifest": manifest, "phase": "install"}, diff=True)
    assert res["changed"] is True and mode_of(dest / "a.txt") == 0o644
    assert res["diff"]["after"] == {"a.txt": "mode 0644"}


def test_delete_extra_removes_unlisted_files_and_their_empty_folders(tmp_path):
    dest = tmp_path / "dest"
    (dest / "old" / "sub").mkdir(parents=True)
    (dest / "old" / "sub" / "stale.txt").write_text("x")
    (dest / "stray.txt").write_text("x")
    (dest / "a.txt").write_bytes(b"alpha\n")
    manifest = make_source({"a.txt": (b"alpha\n", "0644")})
    os.chmod(dest / "a.txt", 0o644)
    keep = call({"dest": str(dest), "manifest": manifest, "phase": "install"})
    assert keep["changed"] is False and (dest / "stray.txt").exists()  # default: extras are left alone
    plan = call({"dest": str(dest), "manifest": manifest, "delete_extra": True})
    assert plan["extra"] == ["old/sub/stale.txt", "stray.txt"] and (dest / "stray.txt").exists()
    res = call({"dest": str(dest), "manifest": manifest, "phase": "install", "delete_extra": True})
    assert sorted(res["deleted"]) == ["old/sub/stale.txt", "stray.txt"]
    assert sorted(p.name for p in dest.iterdir()) == ["a.txt"]
    assert call({"dest": str(dest), "manifest": manifest, "phase": "install", "delete_extra": True})["changed"] is False


def test_manifest_refuses_a_symlinked_folder_leading_outside_dest(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "sub").symlink_to(outside)
    with pytest.raises(ModuleError, match="outside"):
        call({"dest": str(dest), "manifest": make_source({"sub/x": (b"x", "0644")})})


def test_manifest_refuses_a_dest_that_is_a_file_and_unknown_staged_paths(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(ModuleError, match="not a directory"):
        call({"dest": str(f), "manifest": []})
    with pytest.raises(ModuleError, match="not in the manifest"):
        call({"dest": str(tmp_path / "d"), "manifest": [], "phase": "install", "staged": {"x": "/tmp/x"}})


def test_files_with_equal_content_may_share_one_upload(tmp_path):
    files = {"pkg/__init__.py": (b"", "0644"), "pkg/sub/__init__.py": (b"", "0644")}
    manifest = make_source(files)
    upload = tmp_path / "one-upload"
    upload.write_bytes(b"")
    staged = {rel: str(upload) for rel in files}
    res = call({"dest": str(tmp_path / "d"), "manifest": manifest, "phase": "install", "staged": staged})
    assert sorted(res["installed"]) == sorted(files) and not upload.exists()
    assert (tmp_path / "d" / "pkg" / "sub" / "__init__.py").read_bytes() == b""


def test_plan_in_check_mode_reports_what_would_change(tmp_path):
    manifest = make_source({"a.txt": (b"x", "0644")})
    assert call({"dest": str(tmp_path / "d"), "manifest": manifest}, check=True)["changed"] is True
    assert call({"dest": str(tmp_path / "d"), "manifest": manifest})["changed"] is False
    assert not (tmp_path / "d").exists()


def test_manifest_takes_a_default_mode_as_yaml_gives_it_and_refuses_a_symbolic_one(tmp_path):
    manifest = make_source({"a.txt": (b"x", None)})
    dest = tmp_path / "d"
    staged = stage(tmp_path, {"a.txt": (b"x", None)}, ["a.txt"])
    call({"dest": str(dest), "manifest": manifest, "phase": "install", "staged": staged, "mode": 0o640})
    assert mode_of(dest / "a.txt") == 0o640
    with pytest.raises(ModuleError, match="an octal mode"):
        call({"dest": str(dest), "manifest": manifest, "mode": "u=rw"})
    with pytest.raises(ModuleError, match="either 'validate' or 'manifest'"):
        call({"dest": str(dest), "manifest": manifest, "validate": "true %s"})
