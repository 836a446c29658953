"""A hostile host: a real sshd host whose every answer is a string the attacker chose.

Reusable by any feature's tests: `answers(payload)` gives the tasks that make the host answer `payload` through the
results later tasks read (a registered command's stdout and stdout_lines, a file's content via a registered `cat`,
a set_fact of the answer); The payloads are paths, command lines, URLs and environment files that would act on the control node if they ever
chose what runs there: each leaves a canary file behind when it runs.
"""

from __future__ import annotations

import shlex
from pathlib import Path


# How each kind of code argument would act on the control node, given the canary it must never create.
def payloads(canary: Path) -> dict[str, str]:
    return {
        "command": f"touch {canary}",  # a command line, an argv's program
        "path": str(canary),  # a path the module would create, write or remove
        "url": f"file://{canary}",
        "env": f"BASH_ENV={canary}.sh",
    }


def answers(payload: str) -> list[dict]:
    """Tasks on the hostile host that register its answer: `out` (stdout), `lines` (stdout_lines) and a set_fact."""
    return [
        {"name": "hostile answer", "command": {"argv": ["printf", "%s", payload]}, "register": "out"},
        {"name": "hostile fact", "set_fact": {"answer": "{{ out.stdout }}"}},
    ]


def shell_payload(canary: Path) -> str:
    return f"touch {shlex.quote(str(canary))}"
