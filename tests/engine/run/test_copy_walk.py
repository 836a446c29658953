"""copy's walk of a control-node folder (engine/run/actions/copy_walk.py): Ansible's order (a folder's files before
its subfolders', as os.walk gives them), its folders, and the links it keeps."""

from __future__ import annotations

import os

from engine.run.actions.copy_walk import destination_folder, walk_source


def test_files_come_before_subfolders_and_links_back_into_the_walk_stay_links(tmp_path):
    (tmp_path / "a" / "inner").mkdir(parents=True)
    (tmp_path / "a" / "inner" / "deep.txt").write_text("d")
    (tmp_path / "z.txt").write_text("z")
    os.symlink("..", tmp_path / "a" / "up")  # back to the top: a link, not a walk without end
    os.symlink("../z.txt", tmp_path / "a" / "to-z")
    os.symlink("self", tmp_path / "self")  # loops on itself (ELOOP)
    tree = walk_source(tmp_path, local_follow=True)
    assert [rel for _p, rel in tree.files] == ["z.txt", "a/to-z", "a/inner/deep.txt"]
    assert tree.directories == ["a", "a/inner"]
    assert sorted(tree.symlinks) == [("..", "a/up"), ("self", "self")]
    kept = walk_source(tmp_path, local_follow=False)
    assert ("../z.txt", "a/to-z") in kept.symlinks and [rel for _p, rel in kept.files] == ["z.txt", "a/inner/deep.txt"]


def test_a_trailing_slash_sends_the_content_and_none_the_folder_itself():
    assert destination_folder("files/tree/", "/srv/x") == "/srv/x"
    assert destination_folder("files/tree", "/srv/x/") == "/srv/x/tree"
