"""Masking follows the value, not its spelling: escaped forms (JSON, repr), secret-named keys inside ordinary
variables, a no_log result read under its own name, transformed and short secrets. Through the real CLI on the
local host, searching the console, the JSON report and the JUnit report (tests/security/test_secrets.py's
harness); the property test drives random secrets through every shape at once, in process."""

from __future__ import annotations

import io
import json
import string

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.api import run_playbook
from engine.report.console import Console
from tests.security.test_secrets import run_cli, show

SECRET = "ab\\cd\"e'f\nghi-\u00e9\u4e2d-" + "Zq9w"


@pytest.mark.parametrize("expr", ["{{ api_key }}", "{{ api_key | to_json }}", "{{ hostvars[inventory_hostname] }}",
                                  "{{ api_key | upper }}", "{{ api_key | reverse | join }}", "{{ api_key[2:9] }}",
                                  "{{ [api_key, 'x'] | join('-') }}", "{{ {'k': api_key} }}"])
def test_a_secret_in_any_spelling_or_transformation_is_masked(tmp_path, expr):
    play = {"vars": {"api_key": SECRET}, "tasks": [show(expr)]}
    rc, out = run_cli(tmp_path, play, "-vv")
    assert rc == 0, out
    for spelling in (SECRET, json.dumps(SECRET)[1:-1], repr(SECRET)[1:-1], SECRET.upper(), SECRET[::-1], SECRET[2:9]):
        assert spelling not in out, (expr, spelling)


def test_debug_var_of_a_secret_is_masked_in_every_spelling(tmp_path):
    play = {"vars": {"api_key": SECRET}, "tasks": [{"name": "show", "debug": {"var": "api_key"}}]}
    rc, out = run_cli(tmp_path, play, "-vv")
    assert rc == 0 and repr(SECRET)[1:-1] not in out and json.dumps(SECRET)[1:-1] not in out, out


@pytest.mark.parametrize("expr", ["{{ creds.password }}", "{{ creds }}", "{{ creds.password | upper }}"])
def test_a_secret_named_key_inside_an_ordinary_variable_is_masked(tmp_path, expr):
    play = {"vars": {"creds": {"user": "alice", "password": "pw-inside-creds-77"}}, "tasks": [show(expr)]}
    rc, out = run_cli(tmp_path, play)
    assert rc == 0, out
    assert "pw-inside-creds-77" not in out and "PW-INSIDE-CREDS-77" not in out
    if expr == "{{ creds }}":
        assert "alice" in out  # the rest stays readable


def test_debug_var_of_a_variable_holding_a_secret_key(tmp_path):
    play = {"vars": {"creds": {"user": "alice", "password": "pw-inside-creds-78"}},
            "tasks": [{"name": "show", "debug": {"var": "creds"}}]}
    rc, out = run_cli(tmp_path, play)
    assert rc == 0 and "pw-inside-creds-78" not in out and "alice" in out, out


def test_a_no_log_result_read_under_its_own_name_is_masked(tmp_path):
    play = {"tasks": [{"name": "get", "command": {"argv": ["echo", "tok-from-a-no-log-task"]}, "register": "tok", "no_log": True},
                      show("{{ tok.stdout }}"), show("{{ tok.stdout | upper }}")]}
    rc, out = run_cli(tmp_path, play)
    assert rc == 0, out
    assert "tok-from-a-no-log-task" not in out and "TOK-FROM-A-NO-LOG-TASK" not in out


def test_a_short_secret_is_masked_where_a_template_shows_it(tmp_path):
    play = {"vars": {"db_password": "q7"}, "tasks": [show("{{ db_password }}!"), show("{{ db_password | upper }}")]}
    rc, out = run_cli(tmp_path, play)
    assert rc == 0, out
    assert "value: q7!" not in out and "value: Q7" not in out and "value: ********" in out


def test_the_readable_part_of_a_message_stays(tmp_path):
    play = {"vars": {"api_key": "sk-visible-rest-0001"}, "tasks": [show("key={{ api_key | upper }} port=8011")]}
    rc, out = run_cli(tmp_path, play)
    assert rc == 0 and "value: key=******** port=8011" in out, out


# A secret made only of letters can be a word the tool itself prints ("failur" is in "failure_accepted"): such a
# value cannot be told from the output's own text, so the generated secrets mix letters and digits, as keys do.
secrets = st.text(alphabet=string.ascii_letters + string.digits + "\\\"'\n\t-_ é中", min_size=6, max_size=24).filter(
    lambda s: len(s.strip()) >= 6 and s.strip() == s and any(c.isdigit() for c in s) and any(c.isalpha() for c in s))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secret=secrets)
def test_property_random_secrets_never_reach_an_output(tmp_path_factory, secret):
    """Random secrets with quotes, backslashes, newlines and unicode through every shape: console (at -vvv),
    the JSON report, the JUnit file, debug var and msg, to_json, a nested key, a no_log result."""
    tmp = tmp_path_factory.mktemp("prop")
    book = tmp / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                     "vars": {"api_key": secret, "creds": {"password": secret[::-1] + "x"}},
                                     "tasks": [show("{{ api_key }}"), show("{{ api_key | to_json }}"), show("{{ creds }}"),
                                               {"name": "v", "debug": {"var": "api_key"}},
                                               {"name": "echo", "command": {"argv": ["printf", "%s", "{{ api_key }}"]},
                                                "register": "out", "no_log": True},
                                               show("{{ out.stdout }}")]}]))
    buf = io.StringIO()
    res = run_playbook(str(book), inventory={"all": {"hosts": {"h": {"ansible_connection": "local"}}}},
                       report=str(tmp / "r.json"), junit=str(tmp / "j.xml"), console=Console(verbose=3, stream=buf))
    assert res.exit_code == 0, [t["msg"] for t in res.tasks]
    text = buf.getvalue() + (tmp / "r.json").read_text() + (tmp / "j.xml").read_text()
    for value in (secret, secret[::-1] + "x"):
        for spelling in (value, json.dumps(value)[1:-1], repr(value)[1:-1]):
            assert spelling not in text, (value, spelling)


@pytest.mark.parametrize("inventory, playbook_vars", [
    ("[all]\nh1 ansible_connection=local db_password=hunter2 secretpart\n", None),
    ("[all]\nh1 ansible_connection=local\n[all:vars]\nansible_become_password: hunter2secretpart\n", None),
    ("[all]\nh1 ansible_connection=local\n", "db_password=hunter2secretpart"),
])
def test_an_error_about_bad_input_never_quotes_a_secret(tmp_path, inventory, playbook_vars):
    from tests.cli.helpers import invoke

    (tmp_path / "inv.ini").write_text(inventory)
    play = {"hosts": "all", "gather_facts": False, "tasks": []}
    if playbook_vars:
        play["vars"] = playbook_vars
    (tmp_path / "pb.yaml").write_text(yaml.safe_dump([play]))
    code, out = invoke("play", str(tmp_path / "pb.yaml"), "-i", str(tmp_path / "inv.ini"))
    assert code == 4 and "Traceback" not in out, out
    assert "secretpart" not in out and "hunter2" not in out, out


def test_diff_of_content_rendered_from_a_secret_shows_neither_version(tmp_path):
    dest = tmp_path / "env"
    dest.write_text("API_KEY=old-key-nobody-told-us\n")  # the previous secret: this run does not know it
    play = {"vars": {"api_key": "new-key-0123456789"},
            "tasks": [{"name": "write", "copy": {"content": "API_KEY={{ api_key }}\n", "dest": str(dest)}}]}
    rc, out = run_cli(tmp_path, play, "--diff")
    assert rc == 0, out
    assert "old-key-nobody-told-us" not in out and "new-key-0123456789" not in out
    assert "diff hidden" in out
    assert dest.read_text() == "API_KEY=new-key-0123456789\n"
