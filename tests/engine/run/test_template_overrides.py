"""A template file's first line `#jinja2: key: value, ...` sets its Jinja options over the task's
(engine/template/overrides.py), compared with real ansible-playbook; a malformed line fails with Ansible's words."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from engine.template.overrides import OverrideError, split_overrides
from tests.engine.playbook.ansible_side import both_succeed, local_inventory

TEMPLATES = {
    "strings.j2": "#jinja2:variable_start_string:'<<' , variable_end_string:'>>'\na: << a >>\nb: {{ a }}\n",
    "lstrip.j2": "#jinja2: lstrip_blocks: True, trim_blocks: False\n  {% if true %}\nx\n  {% endif %}\nend\n",
    "colon.j2": "#jinja2: line_statement_prefix:\":\"\n: if true\nfoo\n: endif\n",
}


def _book(tree: Path, side: str) -> Path:
    out = tree / side
    out.mkdir()
    tasks = [{"template": {"src": name, "dest": f"{out}/{name}.out", "variable_start_string": "[[",
                           "variable_end_string": "]]"} if name == "lstrip.j2" else
              {"src": name, "dest": f"{out}/{name}.out"}} for name in TEMPLATES]
    book = tree / f"{side}.yml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "vars": {"a": "A"}, "tasks": tasks}]))
    return book


def test_in_template_overrides_are_ansibles(tmp_path):
    (tmp_path / "templates").mkdir()
    for name, text in TEMPLATES.items():
        (tmp_path / "templates" / name).write_text(text)
    both_succeed(_book(tmp_path, "ansible"), _book(tmp_path, "ours"), local_inventory(tmp_path))
    for name in TEMPLATES:
        assert (tmp_path / "ours" / f"{name}.out").read_text() == (tmp_path / "ansible" / f"{name}.out").read_text()
    assert (tmp_path / "ours" / "strings.j2.out").read_text() == "a: A\nb: {{ a }}\n"


@pytest.mark.parametrize(("header", "words"), [
    ("#jinja2: lstrip_blocks=True\n", "Missing key-value separator"),
    ("#jinja2: lstrip_blocks: True,\n", "Empty '#jinja2:' override pair"),
    ("#jinja2: autoescape: True\n", "Invalid '#jinja2:' override key 'autoescape'"),
    ("#jinja2: trim_blocks: True", "Missing newline"),
    ("#jinja2: variable_start_string: '{%'\n", "must be different"),
    ("#jinja2: trim_blocks: __import__('os')\n", "needs a quoted string"),
])
def test_a_malformed_header_is_refused_with_ansibles_words(header, words):
    with pytest.raises(OverrideError, match=words):
        split_overrides(header + ("x\n" if header.endswith("\n") else ""), None)


def test_the_header_wins_over_the_task_and_is_dropped():
    assert split_overrides("#jinja2: trim_blocks: False\nx\n", {"trim_blocks": True, "lstrip_blocks": True}) == \
        ("x\n", {"trim_blocks": False, "lstrip_blocks": True})
    assert split_overrides(" #jinja2: trim_blocks: False\n", None) == (" #jinja2: trim_blocks: False\n", None)
