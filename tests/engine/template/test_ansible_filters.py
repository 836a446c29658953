"""Ansible's filters and tests in our sandbox (engine/template/filters_*.py, tests_ansible.py) against ansible-core's
own filter and test functions on the same inputs: each case is rendered by our Templar (`v | NAME(*a, **k)`) and
computed by ansible-core's plugin function, and the results compared. Then what a comparison cannot show: errors as
one clear message, secrets masked through filters in a real run, the sandbox's bounds."""

from __future__ import annotations

import os
import re
import types

import jinja2
import pytest
import yaml

from engine.api import run_playbook
from engine.template.environment import make_environment
from engine.template.templar import Templar

core = pytest.importorskip("ansible.plugins.filter.core")
from ansible.plugins.filter import mathstuff, urlsplit  # noqa: E402
from ansible.plugins.test import core as test_core  # noqa: E402
from ansible.plugins.test import files as test_files  # noqa: E402
from ansible.plugins.test import mathstuff as test_math  # noqa: E402

THEIR_FILTERS = {**core.FilterModule().filters(), **mathstuff.FilterModule().filters(),
                 **urlsplit.FilterModule().filters()}
THEIR_TESTS = {**test_core.TestModule().tests(), **test_files.TestModule().tests(), **test_math.TestModule().tests()}
USERS = [{"name": "alice", "groups": ["wheel", "dev"], "keys": {"ssh": ["k1"]}}, {"name": "bob", "groups": [],
                                                                                   "keys": {"ssh": ["k2", "k3"]}}]

# (filter, value, args, kwargs)
FILTER_CASES = [
    ("combine", {"a": 1, "b": {"x": 1}}, [{"b": {"y": 2}, "c": 3}], {}),
    ("combine", {"a": 1, "b": {"x": 1}}, [{"b": {"y": 2}}], {"recursive": True}),
    ("combine", [{"a": [1]}, {"a": [2]}, {"a": [1, 3]}], [], {"list_merge": "append_rp"}),
    ("combine", {"a": {"l": [1, 2]}}, [{"a": {"l": [2, 3]}}, {"a": {"l": [4]}}], {"recursive": True, "list_merge": "prepend_rp"}),
    ("combine", {"a": [1]}, [{"a": [2]}], {"list_merge": "keep"}),
    ("combine", {"a": [1]}, [{"a": [2]}], {"list_merge": "append"}),
    ("combine", [], [], {}),
    ("dict2items", {"a": 1, "b": [2]}, [], {}),
    ("dict2items", {"a": 1}, [], {"key_name": "k", "value_name": "v"}),
    ("items2dict", [{"key": "a", "value": 1}, {"key": "b", "value": 2}], [], {}),
    ("items2dict", [{"n": "a", "v": 1}], [], {"key_name": "n", "value_name": "v"}),
    ("ternary", True, ["yes", "no"], {}),
    ("ternary", 0, ["yes", "no"], {}),
    ("ternary", None, ["yes", "no", "none"], {}),
    ("b64encode", "héllo wörld", [], {}),
    ("b64encode", "a?b>", [], {"urlsafe": True}),
    ("b64encode", "hi", [], {"encoding": "utf-16"}),
    ("b64decode", "aMOpbGxv", [], {}),
    ("b64decode", "YT9iPg==", [], {"urlsafe": True}),
    ("to_yaml", {"b": [1, 2], "a": {"x": "ü"}}, [], {}),
    ("to_yaml", {"b": [1, 2]}, [], {"indent": 4, "sort_keys": False}),
    ("to_nice_yaml", {"b": [1, 2], "a": {"x": "y", "z": None}}, [], {}),
    ("to_nice_yaml", [{"a": 1}], [], {"indent": 2}),
    ("from_yaml", "a: 1\nb: [x, 'y']\nc: yes\n", [], {}),
    ("from_yaml", None, [], {}),
    ("to_json", {"b": 1, "a": "é"}, [], {}),
    ("to_json", {"b": 1, "a": 2}, [], {"sort_keys": True, "indent": 1}),
    ("to_nice_json", {"b": [1, {"c": 2}], "a": "x"}, [], {}),
    ("to_nice_json", {"b": 1}, [], {"indent": 2}),
    ("flatten", [1, [2, [3, [4]]], None, "null"], [], {}),
    ("flatten", [1, [2, [3, [4]]]], [], {"levels": 1}),
    ("flatten", [1, None, [None]], [], {"skip_nulls": False}),
    ("union", [1, 2, 3], [[3, 4]], {}),
    ("intersect", [1, 2, 3], [[3, 2, 5]], {}),
    ("difference", [1, 2, 3], [[2]], {}),
    ("symmetric_difference", [1, 2, 3], [[3, 4]], {}),
    ("union", [{"a": 1}, {"b": 2}], [[{"a": 1}, {"c": 3}]], {}),
    ("intersect", [{"a": 1}, {"b": 2}], [[{"a": 1}]], {}),
    ("difference", [{"a": 1}, {"b": 2}], [[{"a": 1}]], {}),
    ("symmetric_difference", [{"a": 1}, {"b": 2}], [[{"a": 1}, {"c": 3}]], {}),
    ("unique", [3, 1, 3, "a", "A"], [], {}),
    ("unique", ["a", "A", "a"], [], {"case_sensitive": True}),
    ("zip", [1, 2, 3], [["a", "b"]], {}),
    ("zip_longest", [1, 2, 3], [["a"]], {"fillvalue": "-"}),
    ("product", [1, 2], [["a", "b"]], {}),
    ("product", [1, 2], [], {"repeat": 2}),
    ("permutations", [1, 2, 3], [], {}),
    ("permutations", [1, 2, 3], [2], {}),
    ("combinations", [1, 2, 3, 4], [2], {}),
    ("subelements", USERS, ["groups"], {}),
    ("subelements", USERS, ["keys.ssh"], {}),
    ("subelements", {"x": USERS[0]}, ["groups"], {}),
    ("subelements", USERS, ["nope"], {"skip_missing": True}),
    ("hash", "abc", [], {}),
    ("hash", "abc", ["sha256"], {}),
    ("hash", "abc", ["blake2b"], {}),
    ("md5", "abc", [], {}),
    ("sha1", "abc", [], {}),
    ("checksum", "abc", [], {}),
    ("md5", 42, [], {}),
    ("regex_findall", "a1 b22 c333", [r"\d+"], {}),
    ("regex_findall", "k=v\nK=w", [r"^(k)=(\w)"], {"multiline": True, "ignorecase": True}),
    ("regex_escape", "a.b*c[d]", [], {}),
    ("regex_escape", "a.b*c[d]^$", [], {"re_type": "posix_basic"}),
    ("regex_replace", "a1b2", [r"\d"], {}),
    ("regex_replace", "a1b2", [r"(\d)", r"<\1>"], {"count": 1}),
    ("regex_replace", "Foo\nfoo", [r"^foo", "x"], {"ignorecase": True, "multiline": True}),
    ("regex_search", "ab12cd34", [r"\d+"], {}),
    ("regex_search", "ab12cd34", [r"(\d)(\d)", "\\2", "\\1"], {}),
    ("regex_search", "user=bob", [r"user=(?P<who>\w+)", "\\g<who>"], {}),
    ("regex_search", "abc", [r"\d"], {}),
    ("regex_search", "ABC", ["b"], {"ignorecase": True}),
    ("split", "a,b,,c", [","], {}),
    ("split", "a b  c", [], {}),
    ("split", "a,b,c", [",", 1], {}),
    ("splitext", "/x/y.tar.gz", [], {}),
    ("splitext", "noext", [], {}),
    ("path_join", ["/etc", "app", "x.conf"], [], {}),
    ("path_join", ["etc", "/abs", "x"], [], {}),
    ("path_join", "single", [], {}),
    ("relpath", "/etc/app/x.conf", ["/etc"], {}),
    ("realpath", "/usr/../etc/./", [], {}),
    ("normpath", "/a//b/../c/", [], {}),
    ("commonpath", ["/a/b/c", "/a/b/d"], [], {}),
    ("basename", "/a/b.txt", [], {}),
    ("dirname", "/a/b.txt", [], {}),
    ("quote", "it's here", [], {}),
    ("quote", None, [], {}),
    ("comment", "one\ntwo", [], {}),
    ("comment", "one\n\ntwo", ["c"], {}),
    ("comment", "text", ["cblock"], {}),
    ("comment", "text", ["xml"], {}),
    ("comment", "text", ["erlang"], {"prefix_count": 2, "postfix": "%%"}),
    ("comment", "text", ["plain"], {"decoration": "; ", "prefix": "", "postfix": ""}),
    ("to_uuid", "host1", [], {}),
    ("to_uuid", "host1", ["6ba7b810-9dad-11d1-80b4-00c04fd430c8"], {}),
    ("strftime", "%Y-%m-%d %H:%M:%S", [1700000000], {"utc": True}),
    ("strftime", "%d/%m/%Y", [86400 * 365.5], {"utc": True}),
    ("human_readable", 1, [], {}),
    ("human_readable", 1536, [], {}),
    ("human_readable", 10 * 2**30, [], {}),
    ("human_readable", 1536, [], {"isbits": True}),
    ("human_readable", 2**31, [], {"unit": "M"}),
    ("human_to_bytes", "10M", [], {}),
    ("human_to_bytes", "1.5 GB", [], {}),
    ("human_to_bytes", "2 KB", [], {}),
    ("human_to_bytes", "1 kilobyte", [], {}),
    ("human_to_bytes", "10", ["K"], {}),
    ("human_to_bytes", "1Mb", [], {"isbits": True}),
    ("human_to_bytes", 42, [], {}),
    ("urlsplit", "https://u:p@example.com:8443/a/b?q=1#frag", [], {}),
    ("urlsplit", "https://example.com/a", ["hostname"], {}),
    ("urlsplit", "https://example.com:8443/a", ["port"], {}),
    ("log", 100, [10], {}),
    ("log", 8, [2], {}),
    ("log", 1, [], {}),
    ("pow", 2, [10], {}),
    ("root", 16, [], {}),
    ("root", 27, [3], {}),
    ("random", ["a", "b", "c", "d"], [], {"seed": "x"}),
    ("random", 100, [], {"seed": 7}),
    ("random", 100, [10, 5], {"seed": "s"}),
    ("shuffle", [1, 2, 3, 4, 5, 6], [], {"seed": "fixed"}),
    ("extract", 1, [["a", "b", "c"]], {}),
    ("type_debug", {"a": 1}, [], {}),
]


def _plain(value):
    """A value as data: tuples and iterators as lists (Ansible's templates give lists), recursively."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, types.GeneratorType, zip)) or type(value).__module__ == "itertools":
        return [_plain(v) for v in value]
    return value


def theirs_filter(name, value, args, kwargs):
    fn = THEIR_FILTERS[name]
    passed = getattr(fn, "jinja_pass_arg", None)
    if passed is not None:
        return _plain(fn(jinja2.Environment(autoescape=False), value, *args, **kwargs))  # noqa: S701 - not HTML
    return _plain(fn(value, *args, **kwargs))


TEMPLAR = Templar(make_environment())


def ours(expr, **variables):
    return _plain(TEMPLAR.evaluate(expr, variables))


@pytest.mark.parametrize(("name", "value", "args", "kwargs"), FILTER_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(FILTER_CASES)])
def test_each_filter_gives_what_ansible_cores_gives(name, value, args, kwargs):
    expected = theirs_filter(name, value, args, kwargs)
    got = ours(f"v | {name}(*a, **k)", v=value, a=args, k=kwargs)
    if name in ("union", "intersect", "difference", "symmetric_difference") and all(isinstance(x, int) for x in got):
        got, expected = sorted(got), sorted(expected)  # a set's order, as theirs
    assert got == expected


def test_from_yaml_all_and_to_datetime_as_ansible():
    text = "a: 1\n---\n- x\n- y\n---\nb: !!str 2\n"
    assert ours("v | from_yaml_all", v=text) == _plain(list(core.from_yaml_all(text)))
    assert ours("v | from_yaml_all", v=None) == []
    expr = "(('2024-03-01 10:00:00' | to_datetime) - ('2024-02-28' | to_datetime('%Y-%m-%d'))).total_seconds()"
    theirs = (core.to_datetime("2024-03-01 10:00:00") - core.to_datetime("2024-02-28", "%Y-%m-%d")).total_seconds()
    assert ours(expr) == theirs == 208800.0


def test_the_random_filter_without_a_seed_picks_from_its_input():
    assert ours("[1, 2, 3] | random") in (1, 2, 3)
    assert 5 <= ours("10 | random(start=5)") < 10
    assert sorted(ours("[3, 1, 2] | shuffle")) == [1, 2, 3]


def test_map_and_select_give_lists_and_min_max_take_an_attribute():
    assert ours("[1, 2] | map('string')") == ["1", "2"]
    assert ours("[1, 2, 3] | select('odd') | length") == 2
    assert ours("v | max(attribute='n')", v=[{"n": 1}, {"n": 3}]) == {"n": 3}
    assert ours("v | min(attribute='n')", v=[{"n": 1}, {"n": 3}]) == {"n": 1}


def test_default_covers_a_missing_attribute_of_an_undefined_value_as_ansible():
    assert ours("nothing.at.all | default('d')") == "d"
    assert ours("v.missing | d('d')", v={}) == "d"
    assert ours("v['a']['b'] | default(1)", v={}) == 1
    assert ours("nothing.at is defined") is False
    with pytest.raises(jinja2.UndefinedError, match="'nothing' is undefined"):
        ours("nothing.at.all")


# (test, value, args, kwargs)
TEST_CASES = [
    ("truthy", "false", [], {}), ("truthy", "false", [], {"convert_bool": True}), ("truthy", [], [], {}),
    ("truthy", "on", [], {"convert_bool": True}), ("truthy", 2, [], {"convert_bool": True}),
    ("falsy", "off", [], {"convert_bool": True}), ("falsy", {}, [], {}), ("falsy", "no", [], {}),
    ("any", [0, "", 1], [], {}), ("all", [1, "x", []], [], {}), ("all", [], [], {}),
    ("nan", float("nan"), [], {}), ("nan", 1.0, [], {}), ("nan", "x", [], {}),
    ("failed", {"failed": True}, [], {}), ("success", {"failed": False}, [], {}), ("changed", {"changed": 1}, [], {}),
    ("changed", {"results": [{"changed": False}, {"changed": True}]}, [], {}),
    ("skipped", {"skipped": True}, [], {}), ("reachable", {}, [], {}), ("unreachable", {"unreachable": True}, [], {}),
    ("timedout", {"timedout": {"period": 3}}, [], {}), ("timedout", {}, [], {}),
    ("finished", {"finished": 0}, [], {}), ("finished", {}, [], {}), ("started", {"started": 1}, [], {}),
    ("match", "abc", ["b"], {}), ("search", "abc", ["b"], {}), ("regex", "abc", ["^abc$"], {"match_type": "fullmatch"}),
    ("regex", "ABC", ["b"], {"ignorecase": True}),
    ("subset", [1], [[1, 2]], {}), ("superset", [1], [[1, 2]], {}), ("issuperset", [1, 2], [[2]], {}),
    ("contains", [1, 2], [2], {}),
    ("abs", "/x", [], {}), ("abs", "x", [], {}), ("is_abs", "/x", [], {}),
    ("directory", "/etc", [], {}), ("is_dir", "/etc/hostname", [], {}), ("file", "/etc/hostname", [], {}),
    ("exists", "/nonexistent-dfp", [], {}), ("link", "/proc/self", [], {}), ("link_exists", "/proc/self", [], {}),
    ("mount", "/", [], {}), ("mount", "/etc", [], {}), ("same_file", "/etc/../etc/hostname", ["/etc/hostname"], {}),
]


@pytest.mark.parametrize(("name", "value", "args", "kwargs"), TEST_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(TEST_CASES)])
def test_each_jinja_test_gives_what_ansible_cores_gives(name, value, args, kwargs):
    if name == "file" and not os.path.exists(value):
        pytest.skip("no /etc/hostname here")
    expected = THEIR_TESTS[name](value, *args, **kwargs)
    assert ours(f"v is {name}(*a, **k)", v=value, a=args, k=kwargs) == expected


def test_a_result_test_on_what_is_not_a_result_says_so():
    with pytest.raises(Exception, match="the 'changed' test expects a task's result"):
        ours("'x' is changed")
    with pytest.raises(jinja2.UndefinedError, match="'nope' is undefined"):
        ours("nope is failed")


@pytest.mark.parametrize(("expr", "words"), [
    ("{'a': 1} | combine([1])", "the combine filter: it combines mappings"),
    ("{} | combine({}, list_merge='x')", "list_merge must be one of"),
    ("{} | combine({}, nope=1)", "it takes recursive and list_merge, not nope"),
    ("[1] | dict2items", "the dict2items filter: it needs a mapping"),
    ("[1] | items2dict", "each item must be a mapping with the keys 'key' and 'value'"),
    ("'abc' | b64decode", "the b64decode filter: the text is not base64"),
    ("'a: [' | from_yaml", "the from_yaml filter: <from_yaml>"),
    ("'x' | hash('nope')", "no hash named 'nope'"),
    ("'x' | regex_search('(')", "is not a regular expression"),
    ("'x' | regex_replace('x', 'y', mandatory_count=2)", "should match 2 times, and matches 1 times"),
    ("'x' | human_to_bytes", "cannot read 'x' as a size"),
    ("'1 XB' | human_to_bytes", "must start with one of"),
    ("'x' | log", "the log filter: it works on numbers"),
    ("'u' | urlsplit('nope')", "unknown URL component: nope"),
    ("'x' | comment('nope')", "no style 'nope'"),
    ("[{'a': 1}] | subelements('b')", "no key 'b' in the item"),
    ("'x' | to_uuid('not-a-uuid')", "is not a UUID"),
])
def test_a_bad_input_fails_with_one_message_naming_the_filter(expr, words):
    with pytest.raises(Exception, match="^[^\n]*$") as caught:
        ours(expr)
    assert words in str(caught.value)


@pytest.mark.parametrize("expr", [
    "range(2000) | product(range(2000))",
    "range(100) | permutations(6)",
    "'x' | to_json(indent=10000000)",
    "'x' | comment(prefix_count=10000000)",
])
def test_the_sandbox_bounds_what_a_filter_may_build(expr):
    from engine.template.bounds import TemplateRefused

    with pytest.raises(TemplateRefused):
        ours(expr)


# -- secrets and a real run -----------------------------------------------------------------------------------------

INV = {"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}
SECRET = "s3cr3t-Pa55w0rd-value"


def test_a_secret_stays_masked_through_filters_in_a_run(tmp_path):
    exprs = ["db_password | b64encode", "{'user': 'u'} | combine({'pw': db_password})", "db_password | hash('sha256')",
             "[db_password] | to_nice_yaml", "db_password | regex_replace('-', '_')", "db_password | split('-')",
             "(db_password | b64encode) | b64decode", "{'k': db_password} | dict2items"]
    tasks = [{"name": f"t{i}", "debug": {"msg": f"{{{{ {e} }}}}"}} for i, e in enumerate(exprs)]
    tasks.append({"name": "kept", "set_fact": {"encoded": "{{ db_password | b64encode }}"}})
    tasks.append({"name": "later", "debug": {"msg": "{{ encoded }} {{ encoded | length }}"}})
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "vars": {"db_password": SECRET},
                                     "tasks": tasks}], sort_keys=False))
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 0, res.tasks
    import base64
    import hashlib
    derived = [SECRET, base64.b64encode(SECRET.encode()).decode(), hashlib.sha256(SECRET.encode()).hexdigest(),
               SECRET.replace("-", "_"), "s3cr3t", "Pa55w0rd"]
    shown = "\n".join(str(r.msg) for r in res.results) + str(res.tasks)
    for text in derived:
        assert text not in shown, (text, shown)
    # a message is rendered again with the mask in the secret's place (engine/template/secrets.py Display)
    assert res.find("t0", "localhost")[0].msg == base64.b64encode(b"********").decode()
    assert res.find("later", "localhost")[0].msg.startswith("******** ")


def test_filters_tests_and_undefined_defaults_in_a_real_run_as_ansible_playbook(tmp_path):
    """The same playbook through real ansible-playbook and ours: each debug message equal."""
    from tests.engine.template.test_lookups import ansible_messages

    exprs = ["users | subelements('groups') | map('last') | list", "{'a': {'b': 1}} | combine({'a': {'c': 2}}, recursive=true)",
             "'a,b' | split(',') | union(['c']) | sort", "[[1, [2]], 3] | flatten", "'x' is truthy",
             "'/etc' is directory", "nothing | default('d')", "{'a': 1} | dict2items | items2dict",
             "true | ternary('y', 'n')", "'data' | b64encode | b64decode", "{'a': [1]} | to_nice_yaml",
             "'a: 1' | from_yaml", "1048576 | human_readable", "'name' | to_uuid", "[1, 2] | product(['a']) | list",
             "'https://h:1/p' | urlsplit('port')", "'abc' | regex_findall('[ab]')", "'x.y' | splitext"]
    tasks = [{"name": f"t{i}", "debug": {"msg": f"{{{{ {e} | to_json }}}}"}} for i, e in enumerate(exprs)]
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "vars": {"users": USERS},
                                     "tasks": tasks}], sort_keys=False))
    theirs = ansible_messages(book, {})
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 0, [t["msg"] for t in res.tasks if t["status"] == "failed"]
    import json
    for i, expr in enumerate(exprs):
        assert json.loads(res.find(f"t{i}", "localhost")[0].msg) == json.loads(theirs[f"t{i}"]), expr


VERSION_CASES = [
    ("1.0", "1.0", "=="), ("1.0", "2.0", "!="), ("1.0", "2.0", "<"), ("2.0", "1.0", ">"), ("1.0", "1.0", "<="),
    ("2.10.1", "2.9", "gt"), ("1.0", "1.0.0", "lt"), ("1.0-RC1", "1.0-RC2", "<"), ("3.12", "3.12", "eq"),
    ("1.0a1", "1.0", "<", {"strict": True}), ("1.0", "1.0.0", "==", {"strict": True}), ("1.2b3", "1.2b10", "lt", {"strict": True}),
    ("1.2.3", "2.0.0", "lt", {"version_type": "semver"}), ("1.0.0-alpha", "1.0.0", "<", {"version_type": "semver"}),
    ("1.0.0-alpha.1", "1.0.0-alpha.beta", "<", {"version_type": "semantic"}), ("1.0.0-2", "1.0.0-10", "<=", {"version_type": "semver"}),
    ("1.0.0+b1", "1.0.0+b2", "==", {"version_type": "semver"}),
    ("2.14.0rc1", "2.14.0", "lt", {"version_type": "pep440"}), ("1.0.post1", "1.0", ">", {"version_type": "pep440"}),
    ("1.0", "1.0", "ge", {"version_type": "loose"}),
]


@pytest.mark.parametrize("case", VERSION_CASES, ids=[f"{c[0]}{c[2]}{c[1]}" for c in VERSION_CASES])
def test_the_version_test_as_ansible_cores(case):
    value, version, op, *rest = case
    kwargs = rest[0] if rest else {}
    assert ours("v is version(w, o, **k)", v=value, w=version, o=op, k=kwargs) == \
        THEIR_TESTS["version"](value, version, op, **kwargs)


@pytest.mark.parametrize(("expr", "words"), [
    ("'1.0' is version('1.0', 'equals')", "Invalid operator type (equals)"),
    ("'1.0' is version('nope', '==', true)", "Version comparison failed: invalid version number 'nope'"),
    ("'1.0' is version('1.0', strict=False, version_type='loose')", "give strict or version_type, not both"),
    ("'1.0' is version('1.0', version_type='boom')", "Invalid version type (boom)"),
    ("'nope' is version('nopenope', version_type='semver')", "invalid semantic version"),
    ("'' is version('1.0', '>')", "version value cannot be empty"),
    ("'1.0' is version('', '>')", "to compare against cannot be empty"),
    ("'1.a' is version('1.1', '<')", "Version comparison failed"),
])
def test_a_bad_version_test_fails_as_ansibles_does(expr, words):
    with pytest.raises(Exception, match=re.escape(words)):
        ours(expr)


@pytest.mark.ssh
def test_a_hosts_answer_stays_a_hosts_answer_through_filters(tmp_path, remote_host):
    """A shell command built from a remote host's registered result is refused, however filters transformed it."""
    tasks = [{"name": "ask", "command": {"argv": ["echo", "x"]}, "register": "out"}]
    for i, expr in enumerate(["out.stdout | b64encode", "{'a': out.stdout} | combine({}) | to_json",
                              "[out.stdout] | flatten | first", "out.stdout | regex_replace('x', 'y')"]):
        tasks.append({"name": f"sh{i}", "shell": f"echo {{{{ {expr} }}}}", "ignore_errors": True})
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    res = run_playbook(str(book), inventory=remote_host.inventory)
    for i in range(4):
        shown = res.find(f"sh{i}", remote_host.name)[0]
        assert shown.status == "failed" and "host returned" in shown.msg, shown


def test_mandatory_names_the_variable_as_ansible():
    with pytest.raises(jinja2.UndefinedError, match=re.escape("Mandatory variable 'nope' not defined.")):
        ours("nope | mandatory")
    with pytest.raises(jinja2.UndefinedError, match="^set it$"):
        ours("nope | mandatory('set it')")
    assert ours("1 | mandatory") == 1
