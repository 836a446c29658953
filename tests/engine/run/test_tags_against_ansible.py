"""Tags as ansible-playbook selects and lists them, compared with real ansible-playbook on the shapes of
ansible-core's own `tags` integration target: comma-separated and templated tags, the special tags `all`,
`tagged`, `untagged`, `always`, `never`, repeated --tags, a tag no task has (a warning, the run goes on),
and ansible_run_tags / ansible_skip_tags."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from engine.api import EXIT_OK, inspect_playbook, run_playbook
from tests.cli.helpers import invoke
from tests.cli.test_listing_against_ansible import parsed
from tests.engine.playbook.ansible_side import real_ansible_playbook


def _task(name: str, tags=None, **module) -> dict:
    task: dict = {"name": name, **(module or {"debug": {"msg": name}})}
    if tags is not None:
        task["tags"] = tags
    return task


PLAYBOOK = [{
    "name": "verify tags work as expected", "hosts": "all", "gather_facts": False,
    "vars": {"the_tags": ["tag3"], "one": "tag4"},
    "tasks": [
        _task("Task_with_tag", "tag"),
        _task("Task_with_always_tag", "always"),
        _task("Task_with_unicode_tag", "くらとみ"),
        _task("Task_with_list_of_tags", ["café", "press"]),
        _task("Task_without_tag"),
        _task("Task_with_never_tag", ["never", "donever"]),
        _task("Task_with_csv_tags", "tag1,tag2"),
        _task("Task_with_templated_tags", "{{ the_tags }}"),
        {"block": [_task("Task_with_templated_block_tag")], "tags": "{{ one }}"},
        _task("Task_with_meta_tags", "meta_tag", meta="noop"),
    ],
}]

CASES = [
    [], ["--tags", "tag"], ["--skip-tags", "tag"], ["--skip-tags", "くらとみ"], ["--skip-tags", "meta_tag"],
    ["--tags", "くらとみ"], ["--tags", "café"], ["--tags", "donever"], ["--tags", "tag1"], ["--tags", "tag3"],
    ["--tags", "tag4"], ["--tags", "tagged"], ["--tags", "untagged"],
    ["--tags", "untagged", "--skip-tags", "always"], ["--tags", "tag,tag1", "--tags", "tag3"],
    ["--tags", "all", "--skip-tags", "tagged"], ["--skip-tags", "all"], ["--skip-tags", "untagged"],
    ["--tags", "never"], ["--tags", "no_such_tag"],
]


def run_ansible(pb: Path, inv: Path, *flags: str) -> tuple[int, str, str]:
    proc = real_ansible_playbook(pb, inv, {"LC_ALL": "C.UTF-8"}, timeout=120, args=flags)
    return proc.returncode, proc.stdout, proc.stderr


def our_flags(flags: list[str]) -> dict:
    """The CLI's --tags / --skip-tags as engine.api takes them (repeated and comma-separated joined)."""
    from dfp_cli.options import split_tags

    tags = [v for f, v in zip(flags, flags[1:]) if f == "--tags"]
    skip = [v for f, v in zip(flags, flags[1:]) if f == "--skip-tags"]
    return {"tags": split_tags(tags), "skip_tags": split_tags(skip)}


@pytest.fixture()
def files(tmp_path) -> tuple[Path, Path]:
    pb, inv = tmp_path / "pb.yaml", tmp_path / "inv.yaml"
    pb.write_text(yaml.safe_dump(PLAYBOOK, sort_keys=False, allow_unicode=True), encoding="utf-8")
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h1": {"ansible_connection": "local",
                                                            "ansible_python_interpreter": sys.executable}}}}))
    return pb, inv


@pytest.mark.parametrize("flags", CASES, ids=lambda f: " ".join(f) or "none")
def test_list_tasks_selects_as_ansible_playbook(files, flags):
    pb, inv = files
    code, theirs, _ = run_ansible(pb, inv, "--list-tasks", "--list-tags", *flags)
    ours_code, ours = inspect_playbook(pb, inv, listings={"tasks", "tags"}, **our_flags(flags))
    assert ours_code == code == EXIT_OK, (ours, theirs)
    assert parsed(ours) == parsed(theirs), f"ours:\n{ours}\nansible-playbook:\n{theirs}"


def test_play_tags_and_role_entry_tags_are_listed_as_ansible_playbook(tmp_path):
    (tmp_path / "roles" / "a" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "a" / "tasks" / "main.yml").write_text(yaml.safe_dump([_task("Role_task")]))
    pb, inv = tmp_path / "pb.yaml", tmp_path / "inv.yaml"
    pb.write_text(yaml.safe_dump([
        {"hosts": "all", "gather_facts": False, "tags": "p1", "tasks": [_task("Play_task", "x")]},
        {"hosts": "all", "gather_facts": False, "vars": {"t": "tag1"}, "roles": [{"role": "a", "tags": "{{ t }}"}],
         "tasks": [_task("Other")]},
    ]))
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h1": {"ansible_connection": "local"}}}}))
    for flags in ([], ["--tags", "tag1"], ["--skip-tags", "tag1"], ["--tags", "p1"]):
        code, theirs, _ = run_ansible(pb, inv, "--list-tasks", *flags)
        ours_code, ours = inspect_playbook(pb, inv, listings={"tasks"}, **our_flags(flags))
        mine, them = parsed(ours), parsed(theirs)
        for play in mine + them:  # a role's tasks also carry the role's name here (docs/ANSIBLE.md)
            play["tasks"] = [(name, tags.replace("[a, ", "[").replace(", a]", "]").replace("[a]", "[]"))
                             for name, tags in play["tasks"]]
        assert ours_code == code == EXIT_OK, (ours, theirs)
        assert mine == them, f"{flags}\nours:\n{ours}\nansible-playbook:\n{theirs}"


def test_a_tag_no_task_has_warns_and_the_run_goes_on(files, tmp_path):
    pb, inv = files
    code, out = invoke("play", str(pb), "-i", str(inv), "--tags", "no_such_tag", "--skip-tags", "alpah")
    assert code == 0, out
    assert "[WARNING]: --tags: no task has the tag(s) 'no_such_tag'; the playbook's tags are: " in out, out
    assert "[WARNING]: --skip-tags: no task has the tag(s) 'alpah'" in out, out
    assert "Task_with_always_tag" in out and "Task_with_tag\n" not in out, out


RUN_TAGS_PLAY = [{"hosts": "all", "gather_facts": False, "tasks": [
    {"name": "check", "assert": {"that": ["ansible_run_tags | sort == expect_run", "ansible_skip_tags | sort == expect_skip"]},
     "tags": ["always"]},
    _task("tagged", ["tag1", "tag3"]),
]}]


@pytest.mark.parametrize("flags,run,skip", [
    ([], ["all"], []), (["--tags", "all"], ["all"], []), (["--tags", "tag1,tag3"], ["tag1", "tag3"], []),
    (["--tags", "tag1", "--tags", "tag3"], ["tag1", "tag3"], []), (["--tags", "untagged"], ["untagged"], []),
    (["--tags", "untagged,tag3"], ["tag3", "untagged"], []), (["--tags", "tagged", "--skip-tags", "tag1"],
                                                              ["tagged"], ["tag1"]),
])
def test_ansible_run_tags_as_ansible_playbook(files, flags, run, skip):
    pb, inv = files
    pb.write_text(yaml.safe_dump(RUN_TAGS_PLAY))
    expect = ["-e", yaml.safe_dump({"expect_run": run, "expect_skip": skip}, default_flow_style=True).strip()]
    code, out, err = run_ansible(pb, inv, *flags, *expect)
    assert code == 0, out + err
    res = run_playbook(pb, inv, extra_vars={"expect_run": run, "expect_skip": skip}, **our_flags(flags))
    assert res.exit_code == 0, res.error or res.tasks
