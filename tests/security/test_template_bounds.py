"""Templates are bounded: every way of widening text is refused before it builds, huge powers are refused, and
rendering has a CPU deadline that a task's `timeout` shortens. Payloads of our own, through the real Templar
and through a playbook run (the error is the task's, one paragraph, the run goes on)."""

from __future__ import annotations

import time

import pytest
import yaml

from engine.api import run_playbook
from engine.template.bounds import TemplateRefused
from engine.template.environment import environment
from engine.template.templar import Templar

WIDE = [
    "{{ '%900000000s' | format('x') }}",
    "{{ 'x' | center(700000000) }}",
    "{{ 'x'.rjust(700000000) }}",
    "{{ 'x'.ljust(700000000) }}",
    "{{ '7'.zfill(700000000) }}",
    "{{ '{:^700000000}'.format('x') }}",
    "{{ '{0:.700000000f}'.format(1.5) }}",
    "{{ '%0700000000d' % 7 }}",
    "{{ '%.700000000f' % 1.5 }}",
    "{{ ('ab' * 400000) | replace('a', 'zzzzzzzz') }}",
    "{{ ('ab' * 400000).replace('b', 'yyyyyyyy') }}",
    "{{ 'q'.replace('', 'w' * 900000) }}",
    "{{ (['k' * 900000] * 900) | join('-') }}",
    "{{ '-'.join(['k' * 900000] * 900) }}",
    "{{ ('x\n' * 400000) | indent(200) }}",
    "{{ ('\t' * 400000).expandtabs(100) }}",
    "{{ ((9 ** 999) ** 999) ** 999 }}",
    "{{ (7 ** 999) ** 999 }}",
]


@pytest.mark.parametrize("source", WIDE)
def test_every_widening_is_refused_before_it_builds(source):
    started = time.process_time()
    with pytest.raises(TemplateRefused, match="refuses"):
        Templar(environment()).render_string(source, {})
    assert time.process_time() - started < 2  # refused up front, not after building it


@pytest.mark.parametrize("source, expected", [
    ("{{ 'v%d' % 3 }}", "v3"), ("{{ '{:>5}'.format('a') }}", "    a"), ("{{ 'a,b' | replace(',', ';') }}", "a;b"),
    ("{{ ['a', 'b'] | join('-') }}", "a-b"), ("{{ 'x' | center(5) }}", "  x  "), ("{{ 2 ** 64 }}", 2**64),
    ("{% for i in range(3) %}{{ i }}{% endfor %}", "012"), ("{{ range(4) | list | length }}", 4),
])
def test_ordinary_templates_are_untouched(source, expected):
    assert Templar(environment()).render_string(source, {}) == expected


def test_nested_loops_stop_at_the_tasks_timeout(tmp_path):
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "spin", "debug": {"msg": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"},
         "timeout": 2, "ignore_errors": True},
        {"name": "after", "debug": {"msg": "still running"}},
    ]}]))
    started = time.monotonic()
    res = run_playbook(str(book), inventory={"all": {"hosts": {"h": {"ansible_connection": "local"}}}})
    spent = time.monotonic() - started
    spin = res.find("spin", "h")[0]
    assert spin.status == "failed" and "s of CPU" in spin.msg and "deadline" in spin.msg, spin.msg
    assert res.find("after", "h")[0].msg == "still running"
    assert spent < 30, spent  # 2 s of CPU, not 10^10 iterations


def test_a_template_that_renders_too_much_text_is_refused():
    with pytest.raises(TemplateRefused, match="renders more than"):
        Templar(environment()).render_string("{% for i in range(20000) %}{{ 'z' * 999 }}{% endfor %}", {})
