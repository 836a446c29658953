"""A default is written in one place: a module's ARGS (with its `var` and `help`), or a role's defaults.yaml.

These tests fail when the argument table (docs/MODULES.md, generated from ARGS), ARGS and the roles' defaults
disagree, when a role passes a variable the engine already links, or when a docstring repeats the table.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from dfp_cli.module_docs import DOC, render
from engine.playbook.modulespec import ENGINE_ACTIONS, LIBRARY, linked_vars, module_args_spec, modules

ROOT = Path(__file__).resolve().parents[3]
TASK_MODULES = sorted(n for n, m in modules().items() if m.path is not None and n not in ENGINE_ACTIONS)


def role_defaults() -> dict[str, tuple[str, object]]:
    """variable -> (defaults file, value) over every role."""
    out = {}
    for f in sorted((ROOT / "roles").glob("*/defaults.y*ml")):
        for k, v in (yaml.safe_load(f.read_text()) or {}).items():
            out[k] = (str(f.relative_to(ROOT)), v)
    return out


def role_tasks() -> list[tuple[str, dict]]:
    out = []
    for f in sorted((ROOT / "roles").glob("*/*.y*ml")) + sorted((ROOT / "playbooks").glob("*.y*ml")):
        stack = [yaml.safe_load(f.read_text())]
        while stack:
            node = stack.pop()
            if isinstance(node, list):
                stack.extend(node)
            elif isinstance(node, dict):
                out.append((str(f.relative_to(ROOT)), node))
                stack.extend(v for v in node.values() if isinstance(v, (list, dict)))
    return out


def test_module_docs_are_generated_from_args():
    assert DOC.read_text(encoding="utf-8") == render(), "docs/MODULES.md is stale: run `invoke module-docs`"


@pytest.mark.parametrize("module", TASK_MODULES)
def test_every_argument_says_what_it_means(module):
    missing = [a for a, o in (module_args_spec(module) or {}).items() if not str(o.get("help", "")).strip()]
    assert not missing, f"library/{module}.py: ARGS entries without a 'help': {missing}"


@pytest.mark.parametrize("module", TASK_MODULES)
def test_docstrings_do_not_repeat_the_argument_table(module):
    text = (LIBRARY / f"{module}.py").read_text(encoding="utf-8")
    assert not re.search(r"^\| *argument *\|", text, re.M), f"library/{module}.py: the argument table lives in ARGS now"


@pytest.mark.parametrize("module", TASK_MODULES)
def test_a_linked_default_is_written_once(module):
    defaults = role_defaults()
    spec = module_args_spec(module) or {}
    for arg, var in linked_vars(module).items():
        if spec[arg].get("default") is not None and var in defaults:
            where, value = defaults[var]
            pytest.fail(f"library/{module}.py ARGS['{arg}'] has default {spec[arg]['default']!r} and {where} sets "
                        f"{var}: {value!r}; keep one of them")


def test_roles_do_not_pass_variables_the_engine_links():
    redundant = []
    for where, node in role_tasks():
        for module in set(node) & set(TASK_MODULES):
            args = node[module] if isinstance(node[module], dict) else {}
            for arg, var in linked_vars(module).items():
                if re.fullmatch(r"\{\{\s*" + re.escape(var) + r"\s*\}\}", str(args.get(arg, ""))):
                    redundant.append(f"{where}: {module}.{arg}: \"{{{{ {var} }}}}\"")
    assert not redundant, "pass-through lines the engine makes unneeded (ARGS 'var'):\n" + "\n".join(redundant)


def _tiny_models_absent(tmp_path, extra_vars):
    from engine.api import run_playbook

    pb = tmp_path / "pb.yaml"
    pb.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                   "tasks": [{"name": "remove", "tiny_models": {"state": "absent"}}]}]))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h": {"ansible_connection": "local"}}}}))
    return run_playbook(pb, inv, extra_vars=extra_vars)


def test_a_required_linked_argument_needs_its_variable(tmp_path):
    res = _tiny_models_absent(tmp_path, {})
    assert res.exit_code == 4 and "'target_dir'" in res.error and "'target_model' is undefined" in res.error


def test_a_required_linked_argument_comes_from_its_variable(tmp_path):
    res = _tiny_models_absent(tmp_path, {"target_model": str(tmp_path / "t"), "drafter_model": str(tmp_path / "d")})
    assert res.exit_code == 0, res.tasks
    assert res.results[0].status == "ok"
