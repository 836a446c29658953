"""The engine knows nothing of the CLI: no module of engine/ imports dfp_cli, and no playbook names a CLI module
for the engine to import (report sections are handed over by the caller)."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from engine.run.results import TaskResult

ROOT = Path(__file__).resolve().parents[2]


def test_no_engine_module_imports_the_cli():
    offenders = []
    for path in sorted((ROOT / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("dfp_cli."):
                names = [node.value]
            offenders += [f"{path.name}:{node.lineno} {n}" for n in names if n.split(".")[0] == "dfp_cli"]
    assert not offenders, offenders


def test_playbooks_name_report_sections_not_modules():
    for book in sorted((ROOT / "playbooks").glob("*.yaml")):
        for play in yaml.safe_load(book.read_text()) or []:
            for name in (play.get("vars") or {}).get("report_sections") or []:
                assert "." not in name, f"{book.name}: report section {name!r} names a module"


def test_an_accepted_failure_is_a_field_of_the_result():
    accepted = TaskResult("h", "t", None, "command", "ok", False, "any text", 0.1, {"failure_accepted": True})
    assert accepted.accepted and accepted.as_report()["failure_accepted"] is True
    plain = TaskResult("h", "t", None, "command", "ok", False, "(failure accepted by failed_when) looks alike", 0.1, {})
    assert not plain.accepted  # recognised by the field, never by the message's words
