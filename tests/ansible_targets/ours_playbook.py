"""`ansible-playbook` for the targets' runme.sh scripts, run by this project's engine: the project's own
ansible-playbook front (python -m dfp_cli.ansible_playbook, with its resident control node), which refuses a flag
the engine has no counterpart for (exit 4), so the measurement counts it as a target that does not run, never as
one that passes."""

from __future__ import annotations

import sys

from dfp_cli.ansible_playbook.client import main as front

# harness.py's TARGET_TIMEOUT_S (test_targets.py checks they agree), written here: importing the harness cost each of
# the targets' ansible-playbook runs about 30 ms, which is the measurement's, not the tool's
TARGET_TIMEOUT_S = 900


def main(argv: list[str]) -> int:
    # ansible-playbook has no host lock, so it never gives a host up because another run (another target's, a
    # test's, on this machine as this user) holds it: the shim waits for such a run as long as a target may take.
    return front(["--lock-wait", str(TARGET_TIMEOUT_S), *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
