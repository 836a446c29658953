"""Where serving-bench and tune put their HTML pages: the folder given with --html (a `~` in it is the user's),
else the tool's own folder on the control node (XDG_CACHE_HOME honoured), never the working folder (a checkout
showed ./dflash-speed/ as untracked). The real CLI run on `local` is tests/speed/test_readme_speed_e2e.py."""

from __future__ import annotations

import os

from dfp_cli import speed_commands as SC


def test_pages_go_to_the_tools_folder_unless_a_folder_is_given(tmp_path, monkeypatch):
    work = tmp_path / "checkout"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    pages = SC.write_html(SC.html_dir({}), {"h1": {"bench": {"runs": []}}, "h2": {"bench": {"runs": []}}})
    assert pages == [str(tmp_path / "cache" / "dflash-provision" / "speed" / n) for n in ("h1.html", "h2.html", "index.html")]
    assert list(work.iterdir()) == []
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert SC.html_dir({"html": "~/pages"}) == str(tmp_path / "home" / "pages")
    assert SC.html_dir({"html": "out"}) == "out"  # relative to where the user runs it: the user's word
    assert os.path.isdir(tmp_path / "cache" / "dflash-provision" / "speed")


def test_the_option_says_where_the_pages_go():
    [html] = [o for o in SC.SERVING_BENCH_OPTIONS if o.name == "html"]
    assert html.default is None and "~/.cache/dflash-provision/speed" in html.help and "dflash-speed" not in html.help
