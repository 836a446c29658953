"""The host lock, control-node side: where it lives, what a run records in it, how a holder is described.

The worker (engine/worker.py, HostLock) holds a flock on the file for its whole life; this module only
decides the path and reads the records it sends back.
"""

from __future__ import annotations

import getpass
import os
import socket
import uuid
from datetime import datetime, timezone
from typing import Any

from engine.templating import to_bool

# Under dfp_root, or the tool's cache folder for plays that define no dfp_root.
LOCK_NAME = ".dflash-provision.lock"
NO_ROOT_LOCK = f"~/.cache/dflash-provision/{LOCK_NAME}"


def new_record() -> dict:
    """What this run writes into every lock it takes; run_id lets two inventory names of one machine share it."""
    return {
        "control_node": socket.gethostname(),
        "user": getpass.getuser(),
        "pid": os.getpid(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "run_id": uuid.uuid4().hex,
    }


def lock_path(view: Any) -> str | None:
    """The lock file for a host's variables, or None when its play opts out (`dfp_host_lock: false`)."""
    try:
        if not to_bool(view.get("dfp_host_lock", True)):
            return None
        root = view.get("dfp_root")
    except Exception:  # an undefined name in dfp_root: the play does not need it, so neither does the lock
        root = None
    if not isinstance(root, str) or not root.strip():
        return NO_ROOT_LOCK
    return f"{root.rstrip('/')}/{LOCK_NAME}"


def describe_holder(holder: Any) -> str:
    """One line about the run that holds (or held) a host lock, from the record it wrote."""
    if not isinstance(holder, dict) or not holder:
        return "a run that left no record"
    if "error" in holder or "unreachable" in holder:
        return f"(could not read the lock: {holder})"
    return (
        f"playbook {holder.get('playbook')} from control node {holder.get('control_node')} (user "
        f"{holder.get('user')}, pid {holder.get('pid')}), started {holder.get('started')}, worker pid "
        f"{holder.get('worker_pid')} on the host"
    )
