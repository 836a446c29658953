"""The cache of module ARGS (engine/playbook/modulespec.py): what it returns is what parsing returns, a changed file is
parsed again, a broken or unwritable cache only costs the parse."""

from __future__ import annotations

import os

import pytest

from engine.playbook import modulespec

MODULE = 'import psutil  # host-only: never imported by the engine\n\nARGS = {"path": {"type": "path", "required": True}, "n": {"type": "int", "default": %d}}\nCODE_ARGS = ("path",)\n'


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(modulespec, "ARGS_CACHE", tmp_path / "cache")
    return tmp_path / "cache"


def test_every_library_module_reads_the_same_from_the_cache(cache):
    paths = sorted(p for p in modulespec.LIBRARY.glob("*.py") if not p.name.startswith("_"))
    parsed = [modulespec._read_args_literal(p) for p in paths]  # parses, then writes the cache
    assert len(list(cache.iterdir())) == len(paths)
    assert [modulespec._read_args_literal(p) for p in paths] == parsed == [modulespec._parse_args_literal(p) for p in paths]
    assert oct(cache.stat().st_mode & 0o777) == "0o700"


def test_the_cache_is_keyed_by_the_files_time_and_size(tmp_path, cache):
    mod = tmp_path / "mine.py"
    mod.write_text(MODULE % 1)
    assert modulespec._read_args_literal(mod)[0]["n"]["default"] == 1
    st = mod.stat()
    mod.write_text(MODULE % 2)  # same size: only the time tells (as for Python's own bytecode cache)
    os.utime(mod, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert modulespec._read_args_literal(mod)[0]["n"]["default"] == 1  # the cached table: the cache was used
    os.utime(mod, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert modulespec._read_args_literal(mod)[0]["n"]["default"] == 2
    mod.write_text(MODULE % 30)  # another size
    assert modulespec._read_args_literal(mod)[0]["n"]["default"] == 30


def test_a_broken_or_unwritable_cache_only_costs_the_parse(tmp_path, cache):
    mod = tmp_path / "mine.py"
    mod.write_text(MODULE % 5)
    modulespec._read_args_literal(mod)
    [entry] = cache.iterdir()
    entry.write_bytes(b"\x00garbage")
    assert modulespec._read_args_literal(mod)[0]["n"]["default"] == 5
    entry.unlink()
    cache.rmdir()
    cache.write_text("a file where the cache folder should be")
    assert modulespec._read_args_literal(mod)[0]["n"]["default"] == 5


def test_a_module_without_literal_args_is_still_a_clear_error(tmp_path, cache):
    mod = tmp_path / "bad.py"
    mod.write_text("ARGS = dict(path=1)\nCODE_ARGS = ()\n")
    with pytest.raises(modulespec.UserError, match="ARGS must be a literal dict"):
        modulespec._read_args_literal(mod)
    assert not cache.exists() or not list(cache.iterdir())
