"""The host lock, control-node side: where it lives, what a run records in it, how a holder is described.

The worker (engine/connection/worker.py, HostLock) holds a flock on the file for its whole life; this module only
decides the path and reads the records it sends back.
"""

from __future__ import annotations

import getpass
import os
import posixpath
import re
import socket
from datetime import datetime, timezone
from typing import Any

from dflash_host.host.paths import SYSTEM_DIRS
from engine.template.markers import to_bool

# Under these, nothing is a tool's root (dflash_host.host.paths.SYSTEM_DIRS lists the folders themselves).
SYSTEM_PREFIXES = ("/etc/", "/proc/", "/sys/", "/dev/", "/boot/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/usr/bin/",
                   "/usr/sbin/", "/usr/lib/", "/var/spool/", "/run/systemd/")

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
        "run_id": os.urandom(16).hex(),  # as uuid4().hex, without uuid (it imports platform)
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


ROOT_VARIABLES = ("dfp_root", "venv_root", "hf_home")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def root_problem(name: str, value: Any) -> str | None:
    """Why a tool root (dfp_root, venv_root, hf_home) cannot be the tool's own folder, or None.

    Checked on the control node before the host lock (the first thing a run creates) so that a root at /,
    /etc, /etc/cron.d or a relative path never gets a file of the tool's."""
    if value is None:
        return None
    text = str(value)
    fix = f"Set {name} to a folder of the tool's own, e.g. ~/dflash (absolute, or starting with ~/)."
    if _CONTROL.search(text):
        return f"{name} holds a control character (a NUL, a newline); {fix}"
    if text.rstrip("/") == "~":
        return f"{name}={text!r} is the home folder itself; {fix}"
    path = "/" + text[2:] if text.startswith("~/") else text
    if not path.startswith("/"):
        return f"{name}={text!r} is a relative path (it would land wherever the run starts); {fix}"
    if ".." in path.split("/"):
        return f"{name}={text!r} contains '..' (not a normalised path); {fix}"
    if posixpath.normpath(path) != (path.rstrip("/") or "/") or "//" in path:
        return f"{name}={text!r} is not a normalised path (no '.' or '//' in it); {fix}"
    clean = posixpath.normpath(path)
    if clean == "/":
        return f"{name}={text!r} is /, a system folder; {fix}"
    if not text.startswith("~/") and (clean in SYSTEM_DIRS or clean.count("/") == 1 or clean.startswith(SYSTEM_PREFIXES)):
        return f"{name}={text!r} is a system folder (or a top-level one); {fix}"
    return None


def roots_problem(view: Any) -> str | None:
    """The first problem with the play's tool roots, or None (an undefined root is the play's business)."""
    for name in ROOT_VARIABLES:
        try:
            value = view.get(name)
        except Exception:  # noqa: S112 - undefined or unrenderable: the task that reads it says so
            continue
        problem = root_problem(name, value)
        if problem:
            return problem
    return None


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
