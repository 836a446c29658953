"""Ansible's Jinja globals `now()` and `undef()` in the engine's sandbox, against ansible-core's own functions."""

from __future__ import annotations

import datetime

from ansible._internal._templating._jinja_plugins import _now as ansible_now

from engine.template.environment import environment


def render(text: str) -> str:
    return environment().from_string(text).render()


def test_now_formats_as_ansible():
    assert render("{{ now(fmt='%Y-%m-%d') }}") == ansible_now(fmt="%Y-%m-%d")
    assert render("{{ now(utc=true, fmt='%Y-%m-%d %H') }}") == ansible_now(utc=True, fmt="%Y-%m-%d %H")
    assert render("{{ now() is string }}") == "False"
    assert abs(datetime.datetime.now().timestamp() - float(render("{{ now(fmt='%s.%f') }}"))) < 60


def test_undef_is_undefined_with_its_hint():
    assert render("{{ undef() is undefined }} {{ undef('say why') is undefined }}") == "True True"
    assert render("{{ undef('x') | default('d') }}") == "d"
