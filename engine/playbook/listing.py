"""What ansible-playbook's --list-hosts, --list-tasks and --list-tags print, for a loaded playbook: the same
layout (`play #N (pattern): name  TAGS: [...]`, hosts after --limit, selected tasks after --tags/--skip-tags,
a role's task as `role : task`), so that a user reads it as Ansible's and a test can compare the two."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from engine.playbook.model import Block, Include, Play, Task

LISTINGS = ("hosts", "tasks", "tags")


def _tags(tags: set[str] | list[str]) -> str:
    return "[" + ", ".join(sorted(tags)) + "]"


def _task_label(task: Task) -> str:
    """`role : name`; an unnamed task by its module as the playbook spells it (`ansible.builtin.debug`), as Ansible."""
    name = task.name if task.named else task.action or task.module
    return f"{task.role} : {name}" if task.role else name


def listed_tasks(items: list) -> list[Task]:
    """The tasks ansible-playbook lists: blocks opened, their rescue and always sections not; an include as itself
    (Ansible reads it at run time)."""
    out: list[Task] = []
    for item in items:
        out += listed_tasks(item.block) if isinstance(item, Block) else [item.marker] if isinstance(item, Include) \
            else [item]
    return out


def listing(path: str | Path, plays: list[Play], hosts_for: Callable[[Play], list[str]],
            selected: Callable[[Task], bool], what: set[str]) -> str:
    """The text of the listings in `what` (a subset of LISTINGS), for `plays` as the run would select them."""
    lines = ["", f"playbook: {path}"]
    for number, play in enumerate(plays, 1):
        lines += ["", f"  play #{number} ({play.hosts}): {play.name}\tTAGS: [{','.join(play.tags)}]"]
        if "hosts" in what:
            hosts = hosts_for(play)
            lines += [f"    pattern: ['{play.hosts}']", f"    hosts ({len(hosts)}):"]
            lines += [f"      {name}" for name in hosts]
        tasks = [t for t in listed_tasks(play.tasks) if selected(t)]
        if "tasks" in what:
            lines.append("    tasks:")
            lines += [f"      {_task_label(t)}\tTAGS: {_tags(t.tags)}" for t in tasks]
        if "tags" in what:
            lines.append(f"      TASK TAGS: {_tags(set().union(*(t.tags for t in tasks)) if tasks else set())}")
    return "\n".join(lines) + "\n"
