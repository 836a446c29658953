"""`ansible-playbook` for the targets' runme.sh scripts, run by this project's engine.

ansible-playbook's own flags (as the scripts write them) become this project's options, and the run goes through
the same `run_play` as `invoke play`. A flag the engine has no counterpart for is refused (exit 4), so the
measurement counts it as a target that does not run, never as one that passes."""

from __future__ import annotations

import argparse
import os
import sys

from invoke import Exit

from dfp_cli.commands import run_play
from dfp_cli.options import PLAYBOOK_OPTIONS

# harness.py's TARGET_TIMEOUT_S (test_targets.py checks they agree), written here: importing the harness cost each of
# the targets' ansible-playbook runs about 30 ms, which is the measurement's, not the tool's
TARGET_TIMEOUT_S = 900


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ansible-playbook", add_help=False, allow_abbrev=False)
    p.add_argument("playbooks", nargs="+")
    p.add_argument("-i", "--inventory", "--inventory-file", action="append", default=[])
    p.add_argument("-e", "--extra-vars", action="append", default=[])
    p.add_argument("-t", "--tags", action="append", default=[])
    p.add_argument("--skip-tags", action="append", default=[])
    p.add_argument("-l", "--limit")
    p.add_argument("-C", "--check", action="store_true")
    p.add_argument("-D", "--diff", action="store_true")
    p.add_argument("-f", "--forks", default="5")
    p.add_argument("-v", "--verbose", action="count", default=0)
    p.add_argument("-c", "--connection")
    p.add_argument("-u", "--user")
    p.add_argument("-b", "--become", action="store_true")
    p.add_argument("--become-user")
    p.add_argument("--private-key", "--key-file")
    p.add_argument("--vault-password-file", "--vault-pass-file")
    p.add_argument("--syntax-check", action="store_true")
    p.add_argument("--list-hosts", action="store_true")
    p.add_argument("--list-tasks", action="store_true")
    p.add_argument("--list-tags", action="store_true")
    p.add_argument("--start-at-task")
    p.add_argument("--force-handlers", action="store_true")
    p.add_argument("--flush-cache", action="store_true")
    return p


def env_inventory() -> list[str]:
    """ansible-playbook's inventory without -i: ANSIBLE_INVENTORY's comma-separated sources (ansible-test sets
    /dev/null: no host but the implicit localhost), never this project's default inventory."""
    return [s for s in os.environ.get("ANSIBLE_INVENTORY", "").split(",") if s.strip()]


def options_of(args: argparse.Namespace) -> dict:
    """This project's option values (invoke play's) for ansible-playbook's parsed flags."""
    opts = {o.name: o.default for o in PLAYBOOK_OPTIONS}
    opts.update(inventory=args.inventory or env_inventory(), extra_vars=list(args.extra_vars), connection=args.connection, limit=args.limit, check=args.check, diff=args.diff,
                forks=args.forks, verbose=args.verbose, user=args.user, become=args.become,
                become_user=args.become_user, private_key=args.private_key,
                vault_password_file=args.vault_password_file, syntax_check=args.syntax_check,
                list_hosts=args.list_hosts, list_tasks=args.list_tasks, list_tags=args.list_tags,
                start_at_task=args.start_at_task,
                tags=",".join(args.tags) or None, skip_tags=",".join(args.skip_tags) or None)
    opts["flush_cache"] = args.flush_cache
    # ansible-playbook has no host lock, so it never gives a host up because another run (another target's, a
    # test's, on this machine as this user) holds it: the shim waits for such a run as long as a target may take.
    opts["lock_wait"] = TARGET_TIMEOUT_S
    if args.force_handlers:
        if "force_handlers" not in opts:
            raise SystemExit("ERROR: --force-handlers: the engine has no such option yet")
        opts["force_handlers"] = True
    return opts


def main(argv: list[str]) -> int:
    args, unknown = parser().parse_known_args(argv)
    if unknown:
        print(f"ERROR: ansible-playbook flags the engine has no counterpart for: {' '.join(unknown)}", file=sys.stderr)
        return 4
    opts = options_of(args)
    for playbook in args.playbooks:
        try:
            run_play(playbook, opts)
        except Exit as exc:
            if exc.code:
                return int(exc.code)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
