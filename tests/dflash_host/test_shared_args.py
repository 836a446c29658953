"""Shared argument entries and groups of entries (dflash_host/shared_args.py): written once, resolved the same
way by the engine (which reads ARGS without importing a module) and by the host (check_args)."""

from __future__ import annotations

import importlib

import pytest

from dflash_host.module import ModuleError, check_args
from dflash_host.shared_args import GROUPS, GROUPS_KEY, SHARED, resolve_entries
from engine.errors import UserError
from engine.playbook.modulespec import ModuleSpec, module_args_spec, modules


def task_modules() -> list[str]:
    return [name for name, spec in modules().items() if spec.path is not None]


@pytest.mark.parametrize("name", task_modules())
def test_the_engine_and_the_host_see_the_same_table(name):
    host_side = resolve_entries(importlib.import_module(f"library.{name}").ARGS)
    assert module_args_spec(name) == host_side
    assert not any("include" in opts for opts in host_side.values() if isinstance(opts, dict))
    assert GROUPS_KEY not in host_side


def test_an_include_is_the_shared_entry_with_the_modules_own_keys_over_it():
    table = module_args_spec("vllm_server")
    assert table["pidfile"]["var"] == SHARED["vllm_pidfile"]["var"] and table["pidfile"]["required"] is True
    assert module_args_spec("gpu_cleanup")["pidfile"]["default"] is None  # optional there
    assert module_args_spec("models")["target_revision"]["default"] == "main"  # the module's own default wins
    shared_users = [n for n in task_modules() if "nvidia_smi" in (module_args_spec(n) or {})]
    assert len(shared_users) >= 4  # one entry, several modules


def test_an_unknown_include_is_a_clear_error_on_both_sides(tmp_path):
    with pytest.raises(ModuleError, match="includes 'no_such', which dflash_host/shared_args.py does not define"):
        check_args({"x": {"include": "no_such"}}, {}, "demo")
    engine_refuses(tmp_path, '{"x": {"include": "no_such"}}', r"demo.py: ARGS argument 'x' includes 'no_such'.*fix the include")


def engine_refuses(tmp_path, args_literal: str, words: str) -> None:
    """The engine reading a module whose ARGS is `args_literal` refuses it, saying `words`."""
    bad = tmp_path / "demo.py"
    bad.write_text(f"ARGS = {args_literal}\nCODE_ARGS = ()\n")
    modules()["demo_bad"] = ModuleSpec("demo_bad", bad, None)
    try:
        with pytest.raises(UserError, match=words):
            module_args_spec("demo_bad")
    finally:
        del modules()["demo_bad"]


def raw_args(name: str) -> dict:
    return importlib.import_module(f"library.{name}").ARGS


@pytest.mark.parametrize(("group", "users"), [("command_options", {"command", "shell"}),
                                              ("file_attributes", {"file", "copy", "lineinfile", "get_url", "unarchive"}),
                                              ("systemd_options", {"systemd_service", "systemd"})])
def test_a_group_is_one_definition_several_modules_use(group, users):
    assert {n for n in task_modules() if group in raw_args(n).get(GROUPS_KEY, ())} == users
    for name in users:
        table, own = module_args_spec(name), {e: raw_args(name)[e] for e in GROUPS[group] if e in raw_args(name)}
        for entry, base in GROUPS[group].items():
            assert table[entry] == {**base, **own.get(entry, {})}  # the module's own keys over the group's
        assert all(set(keys) == {"help"} for keys in own.values()), own  # written once: a module only words its help


def test_a_groups_entries_stand_where_the_group_is_named_the_modules_own_where_it_writes_them():
    assert list(module_args_spec("shell")) == ["cmd", "executable", "expand_argument_vars", *GROUPS["command_options"]]
    copy = list(module_args_spec("copy"))
    assert copy[copy.index("mode"):copy.index("mode") + 4] == ["mode", "directory_mode", "owner", "group"]
    assert module_args_spec("copy")["mode"]["type"] == "raw"  # from the group; copy's help is its own
    assert module_args_spec("copy")["mode"]["help"] != GROUPS["file_attributes"]["mode"]["help"]
    assert module_args_spec("file")["mode"] == GROUPS["file_attributes"]["mode"]


@pytest.mark.parametrize(("groups", "words"), [
    (("no_such",), "_groups names the group 'no_such', which dflash_host/shared_args.py does not define"),
    ("file_attributes", "_groups must be a tuple of group names"),
])
def test_an_unknown_group_is_a_clear_error_on_both_sides(tmp_path, groups, words):
    with pytest.raises(ModuleError, match=f"module 'demo': {words}"):
        check_args({"x": {"type": "str"}, GROUPS_KEY: groups}, {}, "demo")
    engine_refuses(tmp_path, f'{{"x": {{"type": "str"}}, "_groups": {groups!r}}}', f"demo.py: ARGS {words}")


@pytest.mark.parametrize(("given", "text"), [(True, "True"), (False, "False"), (3, "3"), (1.5, "1.5")])
def test_str_and_path_arguments_turn_scalars_into_text_as_ansibles_check_type_str(given, text):
    spec = {"creates": {"type": "path"}, "name": {"type": "str"}}
    assert check_args(spec, {"creates": given, "name": given}, "command") == {"creates": text, "name": text}


def test_a_list_for_a_str_argument_is_still_refused():
    with pytest.raises(ModuleError, match="argument 'name' must be str, got list"):
        check_args({"name": {"type": "str"}}, {"name": ["a"]}, "m")
