"""The task keyword `remote_user`: Ansible's login user for the task's connection.

As in Ansible, a host's `ansible_user` wins over the keyword, and the local connection logs in as nobody (the
keyword changes nothing there). This tool opens one ssh login per host, so a task that would need another
login user than the host's is refused with the fix, rather than run as the wrong user.
"""

from __future__ import annotations

import getpass
from typing import Any

from engine.errors import TaskError


def check_remote_user(task: Any, host: Any, view: Any, templar: Any) -> None:
    """Refuse a `remote_user` that would change the ssh login of this host; accept it where Ansible ignores it."""
    if task.remote_user is None or host.connection == "local":
        return
    if host.user is not None:  # ansible_user is set: it is the login, whatever the keyword says
        return
    login = getpass.getuser()  # ssh's default login
    wanted = str(templar.render_value(task.remote_user, view))
    if wanted != login:
        raise TaskError(f"{task.source} ('{task.name}'): remote_user '{wanted}' would log in to {host.name} as "
                        f"another user than this run's one login ('{login}'); set ansible_user: {wanted} for the "
                        "host (or become_user for the task) instead")
