"""Which handlers a notification runs, resolved as Ansible resolves one.

A task's notification stays a name on its host until a flush (engine/run/runner.py `_flush_handlers`); there it
becomes the handlers it names: the one handler of that name (`ROLE : NAME` too for a role's; where several share
it, Ansible's blocks decide: the last block holding the name wins, inside it the first handler of the name; a
role's handlers are one block, the play's another), and every handler listening to it (one per handler name,
the later block's first).
A handler's own notification is resolved at once, so a handler listed after it runs in the same flush and one
listed before it waits for the next flush, as in Ansible (a handler notifying itself or an earlier one never
loops). A notification no handler answers is Ansible's error, or its warning with ANSIBLE_ERROR_ON_MISSING_HANDLER
false; a handler name that does not render (host variables are not there) is skipped with Ansible's warning."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.errors import UserError
from engine.parsing import ansible_cfg
from engine.playbook.model import Task
from engine.run.results import HostState
from engine.template.markers import is_template


def role_names(role: str | None) -> list[str]:
    """The names a role's handler is notified under: the role's, and a collection role's short name too."""
    if not role:
        return []
    parts = role.split(".")
    return [role, parts[-1]] if len(parts) == 3 else [role]


def handler_blocks(handlers: list[Task]) -> list[list[Task]]:
    """The handlers in Ansible's blocks: each run of handlers from one role (or from the play) is one block."""
    blocks: list[list[Task]] = []
    for handler in handlers:
        if blocks and blocks[-1][0].role == handler.role:
            blocks[-1].append(handler)
        else:
            blocks.append([handler])
    return blocks


def rendered_notify(notify: list[str], render: Callable[[str], Any]) -> list[str]:
    """A task's `notify` entries, a templated one rendered (a list it gives is several notifications); one that
    does not render stays as written (and then names no handler)."""
    out: list[str] = []
    for entry in notify:
        if not is_template(entry):
            out.append(entry)
            continue
        try:
            value = render(entry)
        except Exception:  # noqa: BLE001 - reported as the handler not found, naming what was written
            value = entry
        out.extend(str(v) for v in (value if isinstance(value, (list, tuple)) else [value]))
    return out


class PlayHandlers:
    """One play's handlers as notifications find them. `render_name` renders a templated handler name with the
    play's variables (Ansible renders it once, with no host's); `warn` prints Ansible's warnings."""

    def __init__(self, handlers: list[Task], render_name: Callable[[Task], str], warn: Callable[[str], None]) -> None:
        self.handlers = handlers
        self._render_name = render_name
        self._warn = warn
        self._names: dict[int, str] = {}
        self._included: set[str] = set()  # the roles an include_role brought in so far

    def reveal(self, role: str) -> None:
        """An include_role of this role ran: its handlers are found from now on (Ansible adds them then)."""
        self._included.add(role)

    def _found(self, handler: Task) -> bool:
        return not handler.by_include_role or handler.role in self._included

    def name_of(self, handler: Task) -> str | None:
        """The handler's name as notifications see it; None where a templated one does not render."""
        if not handler.named:
            return None
        if not is_template(handler.name):
            return handler.name
        if id(handler) not in self._names:
            try:
                self._names[id(handler)] = str(self._render_name(handler))
            except Exception as exc:  # noqa: BLE001 - skipped as Ansible skips it
                if not handler.listen:
                    self._warn(f"Handler '{handler.name}' is unusable because it has no listen topics and the name "
                               "could not be templated (host-specific variables are not supported in handler "
                               f"names). The error: {exc}")
                return None
        return self._names[id(handler)]

    def by_name(self, notification: str) -> Task | None:
        """The handler a notification names (`NAME`, or `ROLE : NAME` for a role's)."""
        for block in reversed(handler_blocks(self.handlers)):
            for handler in block:
                if handler.via_include or not self._found(handler):
                    continue  # a handler include's tasks answer to the include, not to their own names
                name = self.name_of(handler)
                if name is not None and notification in {name, *(f"{r} : {name}" for r in role_names(handler.role))}:
                    return handler
        return None

    def notified_by(self, notification: str) -> list[Task]:
        """The handlers one notification runs: the one of that name, and those listening to it (one per name)."""
        named = self.by_name(notification)
        out = [named] if named is not None else []
        seen: set[str] = set()
        for handler in (h for block in reversed(handler_blocks(self.handlers)) for h in block):
            if notification not in handler.listen or handler is named or not self._found(handler):
                continue
            if handler.named and handler.name in seen:
                continue
            seen.add(handler.name)
            out.append(handler)
        return out

    def check(self, state: HostState) -> None:
        """Ansible's error for a notification no handler answers (a warning, and the notification dropped, with
        ANSIBLE_ERROR_ON_MISSING_HANDLER false)."""
        for notification in sorted(state.notified):
            if self.notified_by(notification):
                continue
            msg = (f"The requested handler '{notification}' was not found in either the main handlers list nor in "
                   "the listening handlers list")
            if ansible_cfg.setting("error_on_missing_handler") is None or ansible_cfg.enabled("error_on_missing_handler"):
                raise UserError(msg)
            self._warn(msg)
            state.notified.discard(notification)

    def queue(self, state: HostState) -> None:
        """The host's notifications so far become the handlers they run (pending until each runs)."""
        for notification in sorted(state.notified):
            state.pending_handlers.update(id(h) for h in self.notified_by(notification))
        state.notified.clear()
