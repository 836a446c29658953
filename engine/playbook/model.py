"""A playbook as loaded: plays, blocks, tasks and the includes kept for the run (data only; the loaders fill it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Task:
    name: str
    module: str
    args: dict
    source: str  # "file: task N" for messages
    role: str | None = None
    role_dir: Path | None = None
    # module arguments written as templates (`args: "{{ d }}"`, `debug: "{{ d }}"`), lowest first: each renders to
    # a mapping per host, `args` over them, then checked as the load checks `args` (engine/run/task_args.py)
    args_templates: list = field(default_factory=list)
    register: str | None = None
    when: list = field(default_factory=list)
    loop: Any = None
    loop_var: str = "item"
    loop_kind: str = "loop"  # or with_items (flattened one level), with_dict, with_together, as Ansible loops them
    retries: int | None = None
    until: Any = None
    delay: float = 5.0
    timeout: float | None = None  # seconds on the host; the worker stops the module past it
    notify: list[str] = field(default_factory=list)
    tags: set[str] = field(default_factory=set)
    ignore_errors: bool = False
    changed_when: Any = None
    failed_when: Any = None
    no_log: bool = False
    vars: dict = field(default_factory=dict)
    listen: list[str] = field(default_factory=list)
    check_mode: bool | None = None
    diff: bool | None = None  # None: the command line's --diff
    loop_control: dict = field(default_factory=dict)  # index_var, extended, label, pause (loop_var is loop_var)
    role_vars: dict = field(default_factory=dict)  # params given to the role in the play
    role_defaults: dict = field(default_factory=dict)  # its role's defaults: above every role's, below all else
    # None: inherited (block, role entry, play, then the host's ansible_become* variables). See engine/connection/become.py.
    become: bool | None = None
    become_user: str | None = None
    become_method: str | None = None
    remote_user: str | None = None  # the login user on ssh (the host's ansible_user wins), engine/connection/login.py
    any_errors_fatal: bool | None = None  # None: the block's, else the play's
    # `environment` layers, outermost first (play, blocks, the task): mappings or templates giving one, merged per
    # host at run time (an inner layer's keys win), sent with the module call (engine/run/task_executor.py task_environment)
    environment: list = field(default_factory=list)
    run_once: bool | str = False  # on the first running host of the batch; its result registered on every host
    # (a str: a template, rendered with that host's variables when the task runs)
    # where the module runs (an inventory host or localhost; a template rendered with this host's variables):
    # the task is still this host's (its variables render it, its register lands here); set_fact and gathered
    # facts go to the delegate only with delegate_facts (engine/run/delegation.py)
    delegate_to: str | None = None
    delegate_facts: bool = False
    named: bool = True  # the playbook gave it a name (else `name` is the module's)
    via_include: bool = False  # a task a handler's include brings: notified through the include, not its own name
    by_include_role: bool = False  # a handler include_role brought: notified once that include_role ran
    brings: Any = None  # a handler's include read when notified (a loop, a templated name): its Include
    given: set = field(default_factory=set)  # keywords the task, or a block around it, set (a block's fill the rest)
    action: str = ""  # the module as the playbook spells it (ansible.builtin.copy), for --list-tasks
    # tasks a looped include brought: its loop's names (item, ansible_loop, the index_var) as data (never rendered,
    # above set_fact as Ansible's include params), and what each read (engine/template/taint.py)
    include_names: dict = field(default_factory=dict)
    include_taints: dict = field(default_factory=dict)


@dataclass
class Block:
    """Ansible's block: its tasks, the tasks run on the hosts that failed in them (rescue), and the tasks run
    on every host that entered it whatever happened (always). Its when/tags/vars are inherited by its tasks
    at load time, so only rescue and always need the runner's attention."""

    name: str
    source: str
    block: list = field(default_factory=list)  # Task | Block
    rescue: list = field(default_factory=list)
    always: list = field(default_factory=list)


@dataclass
class Include:
    """include_tasks / include_role: `marker` is the include itself (its `when` decides per host, and it counts as
    one ok task, as Ansible's "included: ..."), `tasks` what it brings, run on the hosts where the marker ran. A
    plain name without a loop is read when the playbook loads; a templated name or a loop is read when reached
    (`dynamic`), per host and item (engine/run/includes.py)."""

    marker: Task
    tasks: list = field(default_factory=list)  # Task | Block | Include
    dynamic: DynamicInclude | None = None


@dataclass
class DynamicInclude:
    """What reading an include when it is reached needs: its options as written (`apply` apart), where it was
    read (the ParseContext: play, role, files), and which of the marker's when and tags are its own (the rest, and
    its become, environment and vars, came from the blocks, role and play around it: they reach what it brings)."""

    spec: dict
    apply: dict
    context: Any  # engine/playbook/context.py ParseContext
    own_when: int = 0  # the marker's last `own_when` conditions are the include's own
    own_tags: set = field(default_factory=set)


def walk_tasks(items: list) -> list[Task]:
    """Every Task in a list of tasks, blocks and includes, depth first (block, rescue, always; an include's
    marker, then its tasks)."""
    out: list[Task] = []
    for item in items:
        if isinstance(item, Block):
            out += walk_tasks(item.block) + walk_tasks(item.rescue) + walk_tasks(item.always)
        elif isinstance(item, Include):
            out += [item.marker] + walk_tasks(item.tasks)
        else:
            out.append(item)
    return out


@dataclass
class Play:
    name: str
    hosts: str
    source: Path
    vars: dict = field(default_factory=dict)
    tasks: list = field(default_factory=list)  # Task | Block, in order
    handlers: list[Task] = field(default_factory=list)
    defaults: dict = field(default_factory=dict)  # every role's defaults, merged in role order
    gather_facts: bool = True
    roles: list[str] = field(default_factory=list)
    serial: list | None = None  # batch sizes (numbers, "N%", templates); None: every host in one batch
    max_fail_percentage: float | None = None  # of a batch; past it the play stops (None: only when all fail)
    become: dict = field(default_factory=dict)  # the play's own become keywords (host lock and facts use them)
    any_errors_fatal: bool = False  # a host failing (or unreachable) stops the play for every host
    tags: list[str] = field(default_factory=list)  # the play's own (its tasks carry them too): --list-tasks shows them
    # where pre_tasks and roles+tasks end in `tasks` (handlers are flushed there, and after post_tasks)
    flush_after: list[int] = field(default_factory=list)
    force_handlers: bool | None = None  # None: the command line's --force-handlers
    strategy: str = "linear"  # or "free": each host through the tasks at its own pace
    order: str = "inventory"  # the hosts' order: inventory, reverse_inventory, sorted, reverse_sorted, shuffle
    connection: str | None = None  # `connection: local`: hosts without their own ansible_connection run here
    vars_files: list = field(default_factory=list)  # names as written (templates; a list inside: first found)
    vars_prompt: list = field(default_factory=list)  # [{name, default, ...}]: answered by -e or the default
    # play keywords written as templates (`strategy: "{{ s | default('linear') }}"`): rendered from -e and the play's
    # vars before the run, then checked as written ones (engine/playbook/plays.py resolve_play_keywords)
    keyword_templates: dict = field(default_factory=dict)

    def fatal(self, task: Task) -> bool:
        """Whether a failure of `task` stops the play: its own (or its block's) any_errors_fatal, else the play's."""
        return self.any_errors_fatal if task.any_errors_fatal is None else task.any_errors_fatal

    def all_tasks(self) -> list[Task]:
        """Every task and handler of the play, blocks opened (what preflight and secret collection look at)."""
        return walk_tasks(self.tasks) + self.handlers
