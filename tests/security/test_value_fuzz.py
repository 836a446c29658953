"""Fuzzing variable values and host data (hypothesis).

- Host data of any content comes back verbatim: it is never rendered, whatever braces it holds.
- A variable value of any content (as from -e or the inventory) either renders or fails with one of the
  errors the runner turns into a clear task failure; it never escapes the sandbox, never crashes the
  engine, and a whole run with it ends with exit 0, 2 or 4, never 1 (internal error).
"""

from __future__ import annotations

from collections import ChainMap
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jinja2 import TemplateError

from engine.api import run_playbook
from engine.errors import TaskError
from engine.template.environment import environment
from engine.template.templar import Templar

FRAGMENTS = ["{{", "}}", "{%", "%}", "{#", "#}", "__class__", "__mro__", "range(", "99999999", "*", "**", "|length",
             "x", "'", '"', "\n", "\x00", "~", "[", "]", "(", ")", "lipsum", "self", ".", "for c in", "endfor", "-"]
hostile = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join),
)
# What a template error may be; anything else would reach the console as an internal error.
CLEAN = (TemplateError, TaskError, RecursionError, TypeError, ValueError, ZeroDivisionError, OverflowError)

_templar = Templar(environment())


@settings(max_examples=300, deadline=None)
@given(hostile)
def test_host_data_comes_back_verbatim(text):
    data = {"out": {"stdout": text}}
    view = _templar.view(ChainMap(data, {"shown": "{{ out.stdout }}"}), (data,))
    assert _templar.render_string("{{ out.stdout }}", view) == text
    assert view["shown"] == text
    assert _templar.render_string("{{ out.stdout | length }}", view) == len(text)


@settings(max_examples=300, deadline=None)
@given(hostile)
def test_variable_values_render_or_fail_cleanly(text):
    trusted = {"v": text}
    view = _templar.view(ChainMap(trusted))
    try:
        _templar.render_string("{{ v }}", view)
    except CLEAN:
        pass


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile)
def test_a_run_with_any_value_never_ends_in_an_internal_error(tmp_path: Path, text):
    pb = tmp_path / "pb.yaml"
    pb.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                   "tasks": [{"name": "use", "debug": {"msg": "{{ v }}"}}]}]))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h": {"ansible_connection": "local"}}}}))
    res = run_playbook(pb, inv, extra_vars={"v": text})
    assert res.exit_code in (0, 2, 4), (res.exit_code, res.error, res.tasks)
    if res.exit_code == 2:
        assert "Traceback" not in res.tasks[-1]["msg"]
