"""What ansible-playbook's --list-hosts, --list-tasks and --list-tags print, for a loaded playbook: the same
layout (`play #N (pattern): name  TAGS: [...]`, hosts after --limit, selected tasks after --tags/--skip-tags,
a role's task as `role : task`), so that a user reads it as Ansible's and a test can compare the two."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from engine.playbook import Play, Task, walk_tasks

LISTINGS = ("hosts", "tasks", "tags")


def _tags(tags: set[str] | list[str]) -> str:
    return "[" + ", ".join(sorted(tags)) + "]"


def _task_label(task: Task) -> str:
    return f"{task.role} : {task.name}" if task.role else task.name


def listing(path: str | Path, plays: list[Play], hosts_for: Callable[[Play], list[str]],
            selected: Callable[[Task], bool], what: set[str]) -> str:
    """The text of the listings in `what` (a subset of LISTINGS), for `plays` as the run would select them."""
    lines = ["", f"playbook: {path}"]
    for number, play in enumerate(plays, 1):
        lines += ["", f"  play #{number} ({play.hosts}): {play.name}\tTAGS: []"]
        if "hosts" in what:
            hosts = hosts_for(play)
            lines += [f"    pattern: ['{play.hosts}']", f"    hosts ({len(hosts)}):"]
            lines += [f"      {name}" for name in hosts]
        tasks = [t for t in walk_tasks(play.tasks) if selected(t)]
        if "tasks" in what:
            lines.append("    tasks:")
            lines += [f"      {_task_label(t)}\tTAGS: {_tags(t.tags)}" for t in tasks]
        if "tags" in what:
            lines.append(f"      TASK TAGS: {_tags(set().union(*(t.tags for t in tasks)) if tasks else set())}")
    return "\n".join(lines) + "\n"
