"""Where a rendered value came from: the hosts whose answers it read, and whether it read a secret.

One tracker serves both trust rules. Every render (engine/template/templar.py Templar.render_value / evaluate) opens a
Taint frame on the view it renders with; every variable read adds what that variable carries:

- a host's answer (a registered result, a fact, a set_fact value computed from one, an item of a loop over them,
  another host's data through hostvars) adds that host's name;
- a secret (a secret-named variable, Ansible Vault, a no_log task's result, a lookup of a secret, a value computed
  from any of these and kept by set_fact or register) sets `secret`.

A variable's taint is kept with its value (engine/run/results.py HostState.provenance for registered and set_fact
values; LazyVars' cache for rendered ones), so it follows the value through filters, set_fact, register and
hostvars. What a render that read a secret gives is itself a secret (Templar adds it to the run's secrets: masked
wherever it is shown, however the template transformed it). What a render that read a host's answer gives never
chooses what runs on the control node (engine/run/trust.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable


class Taint:
    """A mutable record of what one render read: hosts whose answers, and whether a secret."""

    __slots__ = ("hosts", "names", "secret")

    def __init__(self, hosts: Iterable[str] = (), secret: bool = False, names: Iterable[str] = ()) -> None:
        self.hosts: set[str] = set(hosts)
        self.names: set[str] = set(names)  # the variables holding those answers (for the messages)
        self.secret = secret

    def add(self, other: Taint | None) -> None:
        if other is not None:
            if other.hosts:
                self.hosts |= other.hosts
                self.names |= other.names
            self.secret = self.secret or other.secret

    def copy(self) -> Taint:
        return Taint(self.hosts, self.secret, self.names)

    def named(self, name: str) -> Taint:
        """This record as read under `name`: a host's answer names the variable it was read through."""
        return Taint(self.hosts, self.secret, (name,)) if self.hosts and name not in self.names else self

    def describe(self) -> str:
        """'probe, out from gpu1': what a message names."""
        names = f"{', '.join(sorted(self.names))} from " if self.names else ""
        return names + ", ".join(sorted(self.hosts))

    def __bool__(self) -> bool:
        return bool(self.hosts) or self.secret

    def __repr__(self) -> str:
        return f"Taint(hosts={sorted(self.hosts)!r}, secret={self.secret})"


def union(taints: Iterable[Taint | None]) -> Taint:
    out = Taint()
    for t in taints:
        out.add(t)
    return out


CLEAN = Taint()  # never mutated: what the playbook's and the engine's own words carry


# -- the frames of the renders in progress on this thread (each host runs on a thread of its own) ----------------

_local = threading.local()


def open_frame() -> Taint:
    """A new frame for a render starting now: the reads until close_frame land in it."""
    frame = Taint()
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(frame)
    return frame


def close_frame(frame: Taint) -> None:
    """The render is done: what it read also counts for the render it is part of (a variable inside a template)."""
    stack = _local.stack
    while stack and stack.pop() is not frame:  # a frame left open by an exception below is closed with it
        pass
    if stack:
        stack[-1].add(frame)


def current() -> Taint | None:
    """The frame of the render in progress on this thread (None outside any): what it has read so far."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


def note(taint: Taint | None) -> None:
    """A read: the render in progress carries what the value read carries."""
    stack = getattr(_local, "stack", None)
    if stack and taint:
        stack[-1].add(taint)


SECRET = Taint(secret=True)  # never mutated


def note_secret() -> None:
    note(SECRET)
