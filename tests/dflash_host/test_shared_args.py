"""Shared argument entries (dflash_host/shared_args.py): written once, resolved the same way by the engine
(which reads ARGS without importing a module) and by the host (check_args)."""

from __future__ import annotations

import importlib

import pytest

from dflash_host.module import ModuleError, check_args
from dflash_host.shared_args import SHARED, resolve_entries
from engine.errors import UserError
from engine.playbook.modulespec import ModuleSpec, module_args_spec, modules


def task_modules() -> list[str]:
    return [name for name, spec in modules().items() if spec.path is not None]


@pytest.mark.parametrize("name", task_modules())
def test_the_engine_and_the_host_see_the_same_table(name):
    host_side = resolve_entries(importlib.import_module(f"library.{name}").ARGS)
    assert module_args_spec(name) == host_side
    assert not any("include" in opts for opts in host_side.values() if isinstance(opts, dict))


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
    bad = tmp_path / "demo.py"
    bad.write_text('ARGS = {"x": {"include": "no_such"}}\nCODE_ARGS = ()\n')
    modules()["demo_bad_include"] = ModuleSpec("demo_bad_include", bad, None)
    try:
        with pytest.raises(UserError, match=r"demo.py: ARGS argument 'x' includes 'no_such'.*fix the include"):
            module_args_spec("demo_bad_include")
    finally:
        del modules()["demo_bad_include"]
