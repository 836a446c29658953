"""Where a playbook, role or task file is being read: the play it fills, the role, the load budget, and the files
being read inside one another (a circle or a nesting past MAX_IMPORT_DEPTH is one clear error)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.errors import UserError
from engine.parsing.yamlfile import LoadBudget
from engine.playbook.model import Play


@dataclass
class ParseContext:
    """Where tasks are being read: the playbook (roles are found beside it), the play (import_role adds the
    role's defaults and handlers to it), the role the tasks belong to, the files being read (`including`), and
    the budget of the whole load (every file and task it brings in, engine/parsing/yamlfile.py LoadBudget)."""

    playbook: Path
    play: Play | None = None
    role: str | None = None
    role_dir: Path | None = None
    # (resolved path, label) of each file being read, outermost first: the playbook, the playbooks, roles and task
    # files it imports, down to this one (engine/playbook/loader.py enter: none may bring itself in)
    including: tuple = ()
    budget: LoadBudget = None  # type: ignore[assignment] # None: a load of its own (__post_init__)
    # (id(play), RoleCall.identity) of each role use read so far: a role used again with the same parameters runs
    # once per play, as Ansible's (shared by the contexts replace() derives for one playbook's plays)
    roles_run: set = field(default_factory=set)
    extra_vars: dict = field(default_factory=dict)  # -e: a templated import name renders with them (and vars)
    import_vars: dict = field(default_factory=dict)  # the vars of the import_playbook(s) being read: its plays' own

    def __post_init__(self) -> None:
        if self.budget is None:
            self.budget = LoadBudget(self.playbook)


MAX_IMPORT_DEPTH = 20  # playbooks, roles and task files read inside one another; ours nest 3 deep


def enter(ctx: ParseContext, path: Path, label: str, source: str, key: str) -> ParseContext:
    """The context for reading `path` (a playbook, a role's tasks or handlers, a task file) that `key` at `source`
    brings in. The one rule for every import and include (import_playbook, a play's roles, import_role and
    include_role, import_tasks and include_tasks): a file that is already being read would be read without end,
    so it is one paragraph naming the cycle; so is a chain deeper than MAX_IMPORT_DEPTH."""
    path = path.resolve()
    chain = [*ctx.including, (path, label)]
    first = next((i for i, (p, _) in enumerate(ctx.including) if p == path), None)
    if first is not None:
        cycle = " -> ".join(shown for _, shown in chain[first:])
        raise UserError(
            f"{source}: {key} brings in {label}, which imports itself ({cycle}): it would be read without end. "
            "Remove the import (or include) that closes the cycle; a playbook, role or task file may not bring "
            "itself in, directly or through others."
        )
    if len(chain) > MAX_IMPORT_DEPTH:
        raise UserError(
            f"{source}: {key} brings in {label}, nesting imports more than {MAX_IMPORT_DEPTH} deep "
            f"({' -> '.join(shown for _, shown in chain)}; MAX_IMPORT_DEPTH in engine/playbook/loader.py); import the "
            "files from fewer levels."
        )
    return replace(ctx, including=tuple(chain))
