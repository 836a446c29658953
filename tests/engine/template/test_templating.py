"""Templating: lazy variables, native single expressions, StrictUndefined."""

from __future__ import annotations

import jinja2
import pytest

from engine.errors import TaskError
from engine.template.environment import environment
from engine.template.templar import Templar


def test_variables_render_lazily_in_any_order():
    t = Templar(environment())
    v = t.view({"log": "{{ root }}/logs/x.log", "root": "{{ base }}/dflash", "base": "/srv"})
    assert t.render_string("{{ log }}", v) == "/srv/dflash/logs/x.log"


def test_single_expression_keeps_its_type():
    t = Templar(environment())
    v = t.view({"ids": [1, 16, 31], "n": "{{ ids | length }}", "flag": False})
    assert t.render_value({"a": "{{ ids }}", "b": "{{ n }}", "c": "{{ flag }}"}, v) == {"a": [1, 16, 31], "b": 3, "c": False}
    assert t.render_string("ids={{ ids | length }}", v) == "ids=3"


def test_one_expression_with_braces_in_its_strings_keeps_its_type():
    """`{{ x == "{{ y }}" }}` is one expression (Jinja's lexer reads the braces as a string's): its value, not
    text, as Ansible's native rendering gives; whitespace control around one expression too."""
    t = Templar(environment())
    v = t.view({"x": 1})
    assert t.render_string('{{ "{{ y }}" == "{" + "{ y }}" }}', v) is True
    assert t.render_string("{{- x -}}", v) == 1
    assert t.render_string("{{ x }} {{ x }}", v) == "1 1"


def test_undefined_variable_raises():
    t = Templar(environment())
    with pytest.raises(jinja2.UndefinedError, match="'missing' is undefined"):
        t.render_string("{{ missing }}/x", t.view({}))


def test_a_variable_reading_an_undefined_name_is_undefined_where_read():
    """Ansible since 2.14 (its template target's lazy_eval.yml): `x is undefined` and `x | default(...)` hold for
    a variable whose template reads an undefined name; using it fails naming that name."""
    t = Templar(environment())
    v = t.view({"deep": "{{ nowhere }}", "flag": True})
    assert t.evaluate("flag or deep", v) is True
    assert t.evaluate("deep is undefined", v) is True
    assert t.render_string("{{ deep | default('d') }}-x", v) == "d-x"
    with pytest.raises(jinja2.UndefinedError, match="'nowhere' is undefined"):
        t.render_string("{{ deep }}-x", v)
    with pytest.raises(TaskError, match="refers to itself"):
        t.evaluate("me is defined", t.view({"me": "{{ me }}"}))


def test_self_reference_is_reported():
    t = Templar(environment())
    v = t.view({"a": "{{ b }}", "b": "{{ a }}"})
    with pytest.raises(TaskError, match="refers to itself"):
        t.render_string("{{ a }}", v)


def test_bare_expressions_for_when():
    t = Templar(environment())
    v = t.view({"facts": {"gpu": {"driver": False}}, "x": 3})
    assert t.evaluate("not facts.gpu.driver and x > 2", v) is True


def test_extract_reads_each_name_from_a_mapping_like_ansible():
    t = Templar(environment())
    hv = {"a": {"probe": {"current": True, "rank": 0}}, "b": {"probe": {"current": False, "rank": 1}}}
    v = t.view({"hosts": ["a", "b"], "hv": hv})
    assert t.render_string("{{ hosts | map('extract', hv, ['probe', 'current']) | list }}", v) == [True, False]
    stale = "{{ hosts | map('extract', hv, 'probe') | rejectattr('current') | map(attribute='rank') | list }}"
    assert t.render_string(stale, v) == [1]
    with pytest.raises(jinja2.UndefinedError):
        t.render_string("{{ ['c'] | map('extract', hv) | list }}", v)
