"""The one-line `key=value` splitter against ansible-core's own (parse_kv / split_args, imported from the installed
ansible-core as the measure): the same words and options for hand-picked edge cases and for every `k=v` string
of ansible-core's integration targets that ship with it (when they are unpacked beside it)."""

from __future__ import annotations

import functools
import glob

import pytest
import yaml

from engine.parsing.kv import parse_kv, split_args, split_module_string
from tests.ansible_targets.source import targets_dir

splitter = pytest.importorskip("ansible.parsing.splitter")

EDGES = [
    'a=b c="foo bar"', "msg='{{ x }} y'", 'path={{ a | default("x y") }}/z state=touch', "a  b   c=d", "x=1\ny=2",
    "cmd \\\n  more", 'a="x \\" y"', "k=\\u00e9", "a\\=b", "=x", "{% if x %}a b{% endif %} c=d", "{# c #} x=1",
    "echo 'a b' creates=/x chdir=/y", "  lead", "trail  ", 'a="b c" d', "msg=hi\\nthere", "", "mode=0644",
    "a=1 a=2", "x={{ {'k': 'v w'} }}", "echo {{ a }}={{ b }}", "dest={{remote_tmp_dir_test}}/sub1/{{item}} state=touch",
]
SAFE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def target_strings() -> list[str]:
    """Every string with an `=` in the integration targets' task files (module arguments among them)."""
    found: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, str) and "=" in value and key not in ("when", "that", "name"):
                    found.append(value)
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in glob.glob(f"{targets_dir()}/*/**/*.yml", recursive=True):
        try:
            walk(yaml.load(open(path, encoding="utf-8"), Loader=SAFE))  # noqa: S506 - a safe loader, in C
        except (yaml.YAMLError, UnicodeDecodeError):
            continue
    return found


def theirs(text: str, free_form: bool):
    try:
        return {str(k): str(v) for k, v in splitter.parse_kv(text, check_raw=free_form).items()}
    except Exception:  # noqa: BLE001 - their unbalanced-quote error
        return "error"


def mine(text: str, free_form: bool):
    try:
        return parse_kv(text, free_form)
    except ValueError:
        return "error"


@pytest.mark.parametrize("free_form", [False, True])
def test_parse_kv_gives_what_ansible_gives(free_form):
    cases = EDGES + target_strings()
    differ = [(c, theirs(c, free_form), mine(c, free_form)) for c in cases if theirs(c, free_form) != mine(c, free_form)]
    assert not differ, differ[:5]


@pytest.mark.parametrize("text", EDGES)
def test_split_args_gives_ansibles_words(text):
    try:
        expected = [str(w) for w in splitter.split_args(text)]
    except Exception:  # noqa: BLE001
        with pytest.raises(ValueError):
            split_args(text)
        return
    assert split_args(text) == expected


def test_values_stay_strings_and_lose_their_quotes():
    assert parse_kv("mode=0644 create=yes msg='a b' n=1") == {"mode": "0644", "create": "yes", "msg": "a b", "n": "1"}
    assert parse_kv("x.yml") == {"_raw_params": "x.yml"}
    assert parse_kv("echo hi creates=/x", free_form=True) == {"_raw_params": "echo hi", "creates": "/x"}


def test_unbalanced_quotes_or_blocks_are_an_error():
    for text in ('msg="open', "msg={{ x", "a={% if x"):
        with pytest.raises(ValueError):
            parse_kv(text)


def test_split_module_string():
    assert split_module_string("copy src=a dest='b c'") == ("copy", "src=a dest='b c'")
    assert split_module_string("ping") == ("ping", "")
