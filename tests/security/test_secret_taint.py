"""The mask follows the value (engine/template/taint.py): whatever is rendered from a secret, from any source and through any
transformation, is masked wherever it is shown.

Sources: a secret-named variable, a secret-named key inside an ordinary one, an environment variable and a file
read by lookup, a no_log task's result, another host's secret through hostvars. Transformations: filters, slices,
joins, concatenation. Outputs: the console at -vvv, the JSON report, JUnit, --diff, debug/fail/assert messages,
module and engine errors that quote an argument. Each case was a leak before the taint (checked on the commit before
it); the property test drives random secrets and random transformations through all of them at once.
"""

from __future__ import annotations

import io
import json
import re
import string

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.api import run_playbook
from engine.report.console import Console

LOCAL = {"ansible_connection": "local"}

# (template filter chain applied to X, the same in Python)
TRANSFORMS = {
    "upper": ("{{ X | upper }}", str.upper),
    "reverse": ("{{ X | reverse | join }}", lambda s: s[::-1]),
    "regex": ("{{ X | regex_replace('[0-9]', '#') }}", lambda s: re.sub("[0-9]", "#", s)),
    "slice": ("{{ X[1:-1] }}", lambda s: s[1:-1]),
    "join": ("{{ ['pre', X, 'post'] | join('/') }}", lambda s: f"pre/{s}/post"),
    "replace": ("{{ X | replace('a', '@') }}", lambda s: s.replace("a", "@")),
    "title": ("{{ X | title }}", str.title),
}


def run(tmp_path, tasks, inventory=None, play_vars=None, verbose=3, **kw):
    """The play in process on local hosts; everything shown or written: the console (-vvv unless told), the JSON
    report, JUnit."""
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "vars": play_vars or {},
                                     "tasks": tasks}], sort_keys=False))
    buf = io.StringIO()
    res = run_playbook(str(book), inventory=inventory or {"all": {"hosts": {"h": dict(LOCAL)}}},
                       report=str(tmp_path / "r.json"), junit=str(tmp_path / "j.xml"),
                       console=Console(verbose=verbose, stream=buf), **kw)
    return res, buf.getvalue() + (tmp_path / "r.json").read_text() + (tmp_path / "j.xml").read_text()


def forms(value: str) -> set[str]:
    return {f for f in (value, json.dumps(value)[1:-1], repr(value)[1:-1]) if len(f) >= 4}


def assert_hidden(text: str, *values: str) -> None:
    for value in values:
        for form in forms(value):
            assert form not in text, (value, form)


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_a_lookup_of_a_secret_env_var_and_file_after_a_filter(tmp_path, monkeypatch, name):
    template, python = TRANSFORMS[name]
    secret = "env-secret-4711-abc"
    monkeypatch.setenv("DFP_TEST_API_TOKEN", secret)
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "db_password.txt").write_text("file-secret-0815-abc\n")
    tasks = [{"name": "env", "debug": {"msg": "seen " + template.replace("X", "lookup('env', 'DFP_TEST_API_TOKEN')")}},
             {"name": "file", "debug": {"msg": "seen " + template.replace("X", "lookup('file', 'db_password.txt')")}}]
    res, text = run(tmp_path, tasks)
    assert res.exit_code == 0, res.tasks
    assert_hidden(text, python(secret), python("file-secret-0815-abc"))
    assert text.count("seen ") >= 2  # the readable part stays


@pytest.mark.parametrize("source", ["nested key", "no_log result", "lookup", "hostvars"])
def test_diff_of_content_built_from_a_secret_shows_neither_version(tmp_path, monkeypatch, source):
    monkeypatch.setenv("DFP_TEST_API_TOKEN", "lookup-secret-31337")
    dest = tmp_path / "env"
    dest.write_text("KEY=old-value-nobody-told-us\n")
    content = {"nested key": "{{ creds.password | upper }}", "no_log result": "{{ out.stdout | upper }}",
               "lookup": "{{ lookup('env', 'DFP_TEST_API_TOKEN') | upper }}",
               "hostvars": "{{ hostvars['h2'].db_password | upper }}"}[source]
    tasks = [{"name": "echo", "command": {"argv": ["printf", "%s", "no-log-output-2718"]}, "register": "out",
              "no_log": True},
             {"name": "write", "copy": {"content": f"KEY={content}\n", "dest": str(dest)}, "when": "inventory_hostname == 'h'"}]
    inv = {"all": {"hosts": {"h": dict(LOCAL), "h2": dict(LOCAL, db_password="hostvars-secret-999")}}}
    res, text = run(tmp_path, tasks, inventory=inv, play_vars={"creds": {"user": "u", "password": "nested-secret-42"}},
                    diff=True)
    assert res.exit_code == 0, res.tasks
    written = dest.read_text()
    assert written != "KEY=old-value-nobody-told-us\n" and "diff hidden" in text
    assert_hidden(text, "old-value-nobody-told-us", written.strip(), written.strip()[4:])


def test_another_hosts_secret_through_hostvars_transformed(tmp_path):
    inv = {"all": {"hosts": {"h": dict(LOCAL), "h2": dict(LOCAL, db_password="hv-secret-5150")}}}
    tasks = [{"name": "show", "debug": {"msg": "pw {{ hostvars['h2'].db_password | upper }} "
                                               "{{ hostvars['h2']['db_password'] | reverse | join }}"}}]
    res, text = run(tmp_path, tasks, inventory=inv)
    assert res.exit_code == 0, res.tasks
    assert_hidden(text, "HV-SECRET-5150", "0515-terces-vh", "hv-secret-5150")
    assert "pw ********" in text


def test_assert_fail_msg_and_fail_msg_built_from_a_secret(tmp_path):
    tasks = [{"name": "a", "assert": {"that": "false", "fail_msg": "bad {{ api_key | upper }}"}, "ignore_errors": True},
             {"name": "f", "fail": {"msg": "bad {{ api_key | reverse | join }}"}, "ignore_errors": True}]
    res, text = run(tmp_path, tasks, play_vars={"api_key": "assert-secret-1234"})
    assert_hidden(text, "ASSERT-SECRET-1234", "4321-terces-tressa")
    assert text.count("bad ********") >= 2


def test_errors_quoting_an_argument_built_from_a_secret(tmp_path):
    tasks = [{"name": "module error", "stat": {"path": "/nonexistent/{{ api_key | upper }}/x", "get_checksum": "{{ api_key | upper }}"},
              "ignore_errors": True},
             {"name": "engine error", "wait_for": {"timeout": "{{ api_key | upper }}"}, "ignore_errors": True},
             {"name": "file error", "file": {"path": "/proc/{{ api_key | upper }}", "state": "directory"},
              "ignore_errors": True}]
    res, text = run(tmp_path, tasks, play_vars={"api_key": "err-secret-8642"})
    assert [r.status for r in res.results] == ["failed"] * 3, [r.msg for r in res.results]
    assert_hidden(text, "ERR-SECRET-8642", "err-secret-8642")


def test_a_number_computed_from_a_secret_stays_readable(tmp_path):
    """A length is not the secret's text: shown as it is (a substitute of the secret gives the same)."""
    tasks = [{"name": "len", "debug": {"msg": "{{ api_key | length | to_json }}"}},
             {"name": "cmp", "debug": {"msg": "{{ 'same' if api_key == 'x' else 'different' }}"}}]
    res, text = run(tmp_path, tasks, play_vars={"api_key": "len-secret-123"})
    assert [r.msg for r in res.results] == ["14", "different"]
    assert_hidden(text, "len-secret-123")


secrets = st.text(alphabet=string.ascii_letters + string.digits + "\\\"'\n\t \u00e9\u4e2d{}%#-", min_size=6,
                  max_size=20).filter(lambda s: s.strip() == s and sum(c.isalnum() for c in s) >= 5)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secret=secrets, chosen=st.lists(st.sampled_from(sorted(TRANSFORMS)), min_size=1, max_size=3, unique=True),
       verbose=st.integers(0, 3))
def test_property_random_secrets_through_random_transformations_never_reach_an_output(tmp_path_factory, secret, chosen,
                                                                                      verbose):
    tmp = tmp_path_factory.mktemp("taint")
    dest = tmp / "out.txt"
    tasks = []
    for i, name in enumerate(chosen):
        template = TRANSFORMS[name][0].replace("X", "api_key")
        tasks += [
            {"name": f"debug {i}", "debug": {"msg": f"m {template}"}},
            {"name": f"fail {i}", "fail": {"msg": f"m {template}"}, "ignore_errors": True},
            {"name": f"assert {i}", "assert": {"that": "false", "fail_msg": template}, "ignore_errors": True},
            {"name": f"fact {i}", "set_fact": {f"derived{i}": template}},
            {"name": f"shown {i}", "debug": {"var": f"derived{i}"}},
            {"name": f"copy {i}", "copy": {"content": template + "\n", "dest": str(dest)}},
            {"name": f"error {i}", "stat": {"path": "/nonexistent/" + template}, "ignore_errors": True},
        ]
    res, text = run(tmp, tasks, play_vars={"api_key": secret}, verbose=verbose, diff=True)
    assert res.exit_code == 0, [r.msg for r in res.results]
    assert_hidden(text, secret, *(TRANSFORMS[name][1](secret) for name in chosen))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_a_servers_secrets_never_reach_provision_status_or_the_textfile(tmp_path, inventory_file, seed):
    """The API key and the Hub token of a running server (a stand-in vLLM started by the role), random each time,
    through the provision's reports, `invoke status` as text and as JSON, the textfile."""
    import random

    from tests.cli.helpers import invoke
    from tests.fakes.served import PLAYBOOKS, SERVICE, msgs, paths_of, server_vars
    from tests.fakes.vllm_processes import kill_leftovers
    from tests.helpers import play

    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + "!#$%&()*+,-./:;<=>?@[]^_`{|}~"
    api_key, hf_token = ("".join(rng.choice(alphabet) for _ in range(24)) for _ in range(2))
    hv = server_vars(tmp_path, vllm_api_key=api_key, hf_token=hf_token)
    inv = inventory_file(local=True, host_vars={"local": hv})
    try:
        first = play(SERVICE, inv, tmp_path, report=str(tmp_path / "r.json"), junit=str(tmp_path / "j.xml"))
        assert first.exit_code == 0, msgs(first)
        text = (tmp_path / "r.json").read_text() + (tmp_path / "j.xml").read_text()
        for flags in ((), ("--json",)):
            code, out = invoke("status", "--host", "local", "-i", str(inv), *flags)
            assert code == 0, out
            text += out
        metrics = paths_of(hv)["log"].parent.parent / "metrics"
        text += "".join(p.read_text() for p in metrics.glob("*")) if metrics.is_dir() else ""
        assert_hidden(text, api_key, hf_token)
    finally:
        play(PLAYBOOKS / "teardown.yaml", inv, tmp_path)
        kill_leftovers([paths_of(hv)["log"].parent])
