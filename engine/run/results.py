"""What a run records: one TaskResult per host and task, and each host's state during the run."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from engine.inventory.manager import Host
from engine.template.taint import Taint

STATUSES = ("ok", "changed", "failed", "skipped", "unreachable", "ignored", "rescued")


@dataclass
class TaskResult:
    host: str
    task: str
    role: str | None
    module: str
    status: str
    changed: bool
    msg: str
    duration_s: float
    result: dict = field(default_factory=dict)
    ignored: bool = False
    handler: bool = False
    rescued: bool = False  # failed inside a block whose rescue then ran
    delegated_to: str | None = None  # the host the module ran on, when the task was delegated (delegate_to)
    diff: bool | None = None  # the task's `diff` keyword (None: the command line's -D decides what is shown)
    notice: bool = False  # the tool's own finding (a host lock taken over): a warning, in no recap column

    @property
    def accepted(self) -> bool:
        """A failure that the task's failed_when let pass (its module failed, the play goes on as if it had not)."""
        return bool(self.result.get("failure_accepted"))

    def as_report(self) -> dict:
        return {
            "host": self.host,
            "role": self.role,
            "task": self.task,
            "module": self.module,
            "status": self.status,
            "changed": self.changed,
            "msg": self.msg,
            "duration_s": round(self.duration_s, 4),
            "ignored": self.ignored,
            "handler": self.handler,
            "rescued": self.rescued,
            "failure_accepted": self.accepted,
            "warnings": self.result.get("warnings", []),
            **({"delegated_to": self.delegated_to} if self.delegated_to else {}),
        }


@dataclass
class HostState:
    host: Host
    client: Any = None  # engine.connection.client.WorkerClient once connected
    facts: dict | None = None
    registered: dict = field(default_factory=dict)
    facts_set: dict = field(default_factory=dict)
    # Ansible's fact cache (setup's answer, a module's ansible_facts, set_fact with cacheable) and the variables it
    # gives: ansible_facts (names without their ansible_ prefix) and each fact as a variable (fact_variables)
    fact_cache: dict = field(default_factory=dict)
    fact_vars: dict = field(default_factory=lambda: {"ansible_facts": {}})
    included_vars: dict = field(default_factory=dict)  # include_vars: above task vars, below set_fact (rendered)
    failed: bool = False
    unreachable: bool = False
    notified: set = field(default_factory=set)  # notifications since the last flush (engine/run/handlers.py)
    pending_handlers: set = field(default_factory=set)  # id() of the handlers they resolved to, until each runs
    stats: dict = field(default_factory=lambda: {s: 0 for s in STATUSES})
    unreachable_msg: str = ""
    last_failure: TaskResult | None = None  # the result that failed the host, or made it unreachable
    hidden: set = field(default_factory=set)  # registered / set_fact names a no_log task set (secrets to hostvars)
    # What the other hosts read through hostvars: this host's data as it was when the current task started
    # (publish), so its own run of that task never changes what they see (linear strategy).
    shared_registered: dict = field(default_factory=dict)
    shared_facts_set: dict = field(default_factory=dict)
    shared_included_vars: dict = field(default_factory=dict)
    shared_facts: dict | None = None
    shared_fact_vars: dict = field(default_factory=lambda: {"ansible_facts": {}})
    shared_hidden: frozenset = frozenset()
    ended: bool = False  # `meta: end_host` (or end_play) in the current play: no more of its tasks nor handlers
    # Held while a task uses this host's client: its own tasks and those delegated to it from other hosts' threads
    # take turns (the client talks to one worker at a time). A thread only ever holds one host's.
    client_lock: threading.RLock = field(default_factory=threading.RLock)
    delegated_to: str | None = None  # where the current task's module last ran, when delegated
    delegated_connection: str = ""  # and that host's connection
    locked: bool = False  # connected, become checked and the host lock held: ready for tasks (its own or delegated)
    # What each registered or set_fact name carries (engine/template/taint.py): whose answers, whether a secret; a name
    # without a record is this host's answer. loop_taint: what the current loop's items carry.
    provenance: dict = field(default_factory=dict)
    shared_provenance: dict = field(default_factory=dict)
    loop_taint: dict = field(default_factory=dict)
    task_taint: Taint = field(default_factory=Taint)  # what the current task's arguments read (its register's record)

    def add_facts(self, facts: dict) -> None:
        """Facts into this host's fact cache (a later value of a name replaces the earlier one, as Ansible's)."""
        self.fact_cache = {**self.fact_cache, **facts}
        self.fact_vars = fact_variables(self.fact_cache)

    @property
    def host_taint(self) -> Taint:
        """What this host's own answers carry: its name, nothing on the control node (engine/run/trust.py; made once)."""
        taint = self.__dict__.get("_host_taint")
        if taint is None:
            from engine.run.trust import answer_taint  # trust reads HostState: imported when first needed

            taint = self.__dict__["_host_taint"] = answer_taint(self.host.name, self.host.connection)
        return taint

    @property
    def running(self) -> bool:
        """Still taking the play's tasks: active, and not ended by meta (an ended host is not a failed one)."""
        return self.active and not self.ended

    @property
    def active(self) -> bool:
        return not self.failed and not self.unreachable

    def publish(self) -> None:
        """Before a task starts on the hosts: what the others will read of this host during it (shallow copies)."""
        self.shared_registered = dict(self.registered)
        self.shared_facts_set = dict(self.facts_set)
        self.shared_included_vars = dict(self.included_vars)
        self.shared_facts = self.facts
        self.shared_fact_vars = self.fact_vars  # never changed in place: add_facts builds a new one
        self.shared_hidden = frozenset(self.hidden)
        self.shared_provenance = dict(self.provenance)


# Names a host's facts never set as variables: the connection's, become's and the interpreter's settings, the
# magic names, the tool's own settings (what Ansible's clean_facts removes, and dfp_*): what a host returns never
# chooses how it or another host is reached, nor the run's own variables.
RESERVED_FACTS = frozenset({
    "ansible_connection", "ansible_host", "ansible_user", "ansible_port", "ansible_password", "ansible_pipelining",
    "ansible_timeout", "ansible_shell_type", "ansible_shell_executable", "ansible_module_compression",
    "ansible_private_key_file", "ansible_network_os", "ansible_connection_user", "ansible_host_key_checking",
    "ansible_rsync_path", "ansible_playbook_python", "ansible_facts", "ansible_group_priority", "add_host",
    "add_group", "inventory_hostname", "inventory_hostname_short", "group_names", "groups", "hostvars", "omit",
    "playbook_dir", "role_path", "role_name", "vars", "environment", "facts", "ansible_play_hosts",
    "ansible_play_hosts_all", "ansible_play_batch", "ansible_check_mode", "ansible_diff_mode", "ansible_version",
})
RESERVED_FACT_PREFIXES = ("ansible_ssh_", "ansible_sftp_", "ansible_scp_", "ansible_paramiko_", "ansible_become",
                          "ansible_local_", "ansible_docker_", "dfp_")


def reserved_fact(name: str) -> bool:
    if name in RESERVED_FACTS or (name.startswith("ansible_") and name.endswith("_interpreter")):
        return True
    return name.startswith(RESERVED_FACT_PREFIXES) and not name.startswith("ansible_ssh_host_key_")


def fact_variables(cache: dict) -> dict:
    """The variables a fact cache gives, as Ansible's (INJECT_FACTS_AS_VARS): `ansible_facts` (each name without
    its ansible_ prefix, ansible_local kept whole) and each fact under its own name, but the reserved ones."""
    namespaced = {(k[8:] if k.startswith("ansible_") and k != "ansible_local" else k): v for k, v in cache.items()}
    return {**{k: v for k, v in cache.items() if not reserved_fact(k)}, "ansible_facts": namespaced}


def status_of(result: dict) -> str:
    """The status a module's or an action's result dict stands for."""
    if result.get("skipped"):
        return "skipped"
    if result.get("failed"):
        return "failed"
    return "changed" if result.get("changed") else "ok"
