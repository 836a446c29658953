"""Flags as an ansible-playbook user types them, through the real `invoke` CLI."""

from __future__ import annotations

import os

import pytest

from tests.cli.helpers import ROOT, assert_refused, invoke, write_play


def _assert(that: list[str]) -> dict:
    return {"name": "check", "assert": {"that": that}}


# -- -e ---------------------------------------------------------------------------------------------------
def test_a_value_that_starts_like_json_but_does_not_parse_is_refused_by_position_never_echoed(tmp_path):
    pb, inv, marker = write_play(tmp_path, [])
    code, out = invoke("play", str(pb), "-i", str(inv), "-e", "ok=1", "-e", 'api_token=["s3cr3t-do-not-show",')
    assert_refused(code, out, marker, "-e number 2 (api_token)", "not valid JSON", "not shown")
    assert "s3cr3t-do-not-show" not in out
    assert len([line for line in out.splitlines() if line.strip()]) == 1, out  # one paragraph


@pytest.mark.parametrize("value", ['x=["/tmp",', 'x={"a" 1}', 'x="unterminated'])
def test_malformed_json_values_are_refused(tmp_path, value):
    pb, inv, marker = write_play(tmp_path, [])
    code, out = invoke("play", str(pb), "-i", str(inv), "-e", value)
    assert_refused(code, out, marker, "-e number 1 (x)", "not valid JSON")


def test_a_json_object_or_yaml_flow_mapping_merges_its_keys(tmp_path):
    pb, inv, marker = write_play(tmp_path, [_assert(["port == 8001", "ids == [1, 2]", "name == 'tiny'", "enabled == true"])])
    code, out = invoke("play", str(pb), "-i", str(inv), "-e", '{"port": 8001, "ids": [1, 2]}', "-e", "{name: tiny, enabled: yes}")
    assert code == 0, out
    assert marker.is_dir()


def test_a_whole_argument_that_is_not_a_mapping_is_refused(tmp_path):
    pb, inv, marker = write_play(tmp_path, [])
    code, out = invoke("play", str(pb), "-i", str(inv), "-e", "[1, 2]")
    assert_refused(code, out, marker, "-e number 1", "must be a mapping")
    code, out = invoke("play", str(pb), "-i", str(inv), "-e", '{"a": 1,')
    assert_refused(code, out, marker, "-e number 1", "JSON object or YAML flow mapping")


def test_later_extra_vars_win_and_templates_stay_strings(tmp_path):
    pb, inv, _ = write_play(tmp_path, [_assert(["port == 2", "joined == 'ab'", "words == 'a b c'"])])
    code, out = invoke("play", str(pb), "-i", str(inv), "-e", "port=1", "-e", '{"port": 2}',
                       "-e", "joined={{ 'a' ~ 'b' }}", "-e", "words=a b c")
    assert code == 0, out


def test_several_key_value_words_in_one_extra_var_are_several_variables(tmp_path):
    """As ansible-playbook's -e "a=1 b=two" (include_import's runme passes three file names so)."""
    pb, inv, _ = write_play(tmp_path, [_assert(["a == 1", "b == 'two words'", "c == 'x.yml'"])])
    code, out = invoke("play", str(pb), "-i", str(inv), "-e", "a=1 b='two words' c=x.yml")
    assert code == 0, out


# -- tags ------------------------------------------------------------------------------------------------
def test_a_tag_no_task_has_is_warned_about_listing_the_playbook_tags_and_the_run_goes_on(tmp_path):
    """As ansible-playbook: the run goes on (only `always` tasks run), with a [WARNING] line naming the tags."""
    pb, inv, marker = write_play(tmp_path, [{"name": "tagged", "debug": {"msg": "x"}, "tags": ["alpha", "beta"]}])
    code, out = invoke("play", str(pb), "-i", str(inv), "--tags", "nosuchtag")
    assert code == 0 and not marker.exists(), out
    assert "[WARNING]: --tags: no task has the tag(s) 'nosuchtag'; the playbook's tags are: alpha, beta, mark" in out
    code, out = invoke("play", str(pb), "-i", str(inv), "--skip-tags", "alpah")
    assert code == 0 and marker.exists(), out
    assert "[WARNING]: --skip-tags: no task has the tag(s) 'alpah'" in out, out


def test_tags_that_together_select_no_task_are_warned_about(tmp_path):
    pb, inv, marker = write_play(tmp_path, [{"name": "tagged", "debug": {"msg": "x"}, "tags": ["alpha"]}])
    code, out = invoke("play", str(pb), "-i", str(inv), "-t", "alpha", "--skip-tags", "alpha")
    assert code == 0 and "selects no task" in out and not marker.exists(), out


def test_repeated_tags_add_up(tmp_path):
    pb, inv, marker = write_play(tmp_path, [{"name": "a", "debug": {"msg": "ran-a"}, "tags": "alpha"},
                                            {"name": "b", "debug": {"msg": "ran-b"}, "tags": "beta"}])
    code, out = invoke("play", str(pb), "-i", str(inv), "-t", "alpha", "--tags", "beta,mark")
    assert code == 0 and "ran-a" in out and "ran-b" in out and marker.exists(), out


def test_a_known_tag_runs_only_its_tasks(tmp_path):
    pb, inv, marker = write_play(tmp_path, [{"name": "tagged", "debug": {"msg": "ran-tagged"}, "tags": ["alpha"]}])
    code, out = invoke("play", str(pb), "-i", str(inv), "-t", "alpha")
    assert code == 0 and "ran-tagged" in out, out
    assert not marker.exists()


# -- -C, -D, -v ------------------------------------------------------------------------------------------
def test_check_and_diff_short_flags_as_in_ansible(tmp_path):
    target = tmp_path / "file.txt"
    target.write_text("old line\n")
    pb, inv, marker = write_play(tmp_path, [{"name": "content", "copy": {"dest": str(target), "content": "new line\n"}}])
    code, out = invoke("play", str(pb), "-i", str(inv), "-C", "-D")
    assert code == 0, out
    assert not marker.exists() and target.read_text() == "old line\n", "check mode changed the host"
    assert "--- before" in out and "-old line" in out and "+new line" in out, out  # the diff is shown, as lines


@pytest.mark.parametrize("flags,level", [
    ((), 0), (("-v",), 1), (("-vv",), 2), (("-vvv",), 3), (("-v", "-v"), 2),
    (("--verbose",), 1), (("--verbose=2",), 2), (("--verbose", "3"), 3), (("-v", "4"), 4),
])
def test_verbosity_forms_give_the_level(tmp_path, flags, level):
    """Each form through Invoke's real parser with the project's option table (a collection that prints it)."""
    (tmp_path / "tasks.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from invoke import Collection\n"
        "from dfp_cli.options import PLAYBOOK_OPTIONS, invoke_task, verbosity_of\n"
        "def body(c, **o):\n"
        "    print('level', verbosity_of(o['verbose']), 'check', o['check'], 'inventories', o['inventory'])\n"
        "ns = Collection(invoke_task(body, PLAYBOOK_OPTIONS, 'show', 'print the options'))\n"
    )
    code, out = invoke("show", *flags, "-C", "-i", "a.yaml", "-i", "b.yaml", cwd=tmp_path)
    assert code == 0, out
    assert f"level {level} check True inventories ['a.yaml', 'b.yaml']" in out, out


def test_verbose_equals_n_is_accepted_by_the_commands(tmp_path):
    pb, inv, marker = write_play(tmp_path, [])
    code, out = invoke("play", str(pb), "-i", str(inv), "--verbose=2")
    assert code == 0 and marker.is_dir(), out
    code, out = invoke("play", str(pb), "-i", str(inv), "--verbose=lots")
    assert_refused(code, out, None, "--verbose takes a level")


# -- -i, --vault-password-file ---------------------------------------------------------------------------
def test_several_inventories_later_files_win(tmp_path):
    pb, inv, _ = write_play(tmp_path, [_assert(["where == 'second'", "only_first == 1"])])
    first = tmp_path / "first.yaml"
    first.write_text("all:\n  hosts:\n    local: {ansible_connection: local, where: first, only_first: 1}\n")
    second = tmp_path / "second.yaml"
    second.write_text("all:\n  hosts:\n    local: {where: second}\n")
    code, out = invoke("play", str(pb), "-i", str(first), "-i", str(second))
    assert code == 0, out


VAULT = ROOT / "tests" / "inventory" / "cases" / "vault"


def test_vault_password_file_flag_and_environment(tmp_path):
    args = ("inventory", "--host", "gpu1", "-i", str(VAULT / "hosts.yaml"))
    code, out = invoke(*args, env={k: v for k, v in os.environ.items() if k != "ANSIBLE_VAULT_PASSWORD_FILE"})
    assert_refused(code, out, None, "--vault-password-file")
    code, out = invoke(*args, "--vault-password-file", str(VAULT / "vault-password"))
    assert code == 0 and '"db_password": "********"' in out, out
    assert "dfp-vault-inline-secret-77" not in out  # decrypted, and never shown
    code, out = invoke(*args, env=dict(os.environ, ANSIBLE_VAULT_PASSWORD_FILE=str(VAULT / "vault-password")))
    assert code == 0 and '"plain_var": "visible-value"' in out, out


# -- the recap --------------------------------------------------------------------------------------------
def test_recap_ok_counts_changed_tasks_as_ansible_does(tmp_path):
    pb, inv, _ = write_play(tmp_path, [{"name": "said", "debug": {"msg": "x"}}])
    code, out = invoke("play", str(pb), "-i", str(inv))
    assert code == 0, out
    # Ansible's recap line: its field order, each count padded to four columns, the host name to 26
    assert f"{'local':<26} : ok=2    changed=1    unreachable=0    failed=0    skipped=0    rescued=0    ignored=0" in out, out


@pytest.mark.parametrize("flag, value", [("--forks", "abc"), ("--lock-wait", "1.5.2"), ("-f", "")])
def test_a_numeric_flag_that_is_not_a_number_is_one_paragraph_and_exit_4(tmp_path, flag, value):
    pb, inv, marker = write_play(tmp_path, [])
    code, out = invoke("play", str(pb), "-i", str(inv), flag, value)
    assert_refused(code, out, marker, "takes a whole number")
    assert len(out.strip().splitlines()) == 1 and ("--forks" in out or "--lock-wait" in out), out
