"""ansible-playbook's flags, as the scripts written for it give them, turned into `invoke play`'s options; and
the in-process run of one command line (what the resident control node's child runs, or this process itself).

A flag the engine has no counterpart for is refused (exit 4), never ignored."""

from __future__ import annotations

import argparse
import os
import sys


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
    p.add_argument("-K", "--ask-become-pass", action="store_true")
    p.add_argument("--private-key", "--key-file")
    p.add_argument("--vault-password-file", "--vault-pass-file")
    p.add_argument("--syntax-check", action="store_true")
    p.add_argument("--list-hosts", action="store_true")
    p.add_argument("--list-tasks", action="store_true")
    p.add_argument("--list-tags", action="store_true")
    p.add_argument("--start-at-task")
    p.add_argument("--force-handlers", action="store_true")
    p.add_argument("--flush-cache", action="store_true")
    # Not ansible-playbook's (it has no host lock): seconds to wait for another run's lock on a host, as
    # `invoke play --lock-wait`; a script that runs many playbooks back to back sets it high.
    p.add_argument("--lock-wait", type=float)
    return p


def env_inventory() -> list[str]:
    """ansible-playbook's inventory without -i: ANSIBLE_INVENTORY's comma-separated sources (ansible-test sets
    /dev/null: no host but the implicit localhost), never this project's default inventory."""
    return [s for s in os.environ.get("ANSIBLE_INVENTORY", "").split(",") if s.strip()]


def options_of(args: argparse.Namespace) -> dict:
    """This project's option values (invoke play's) for ansible-playbook's parsed flags."""
    from dfp_cli.options import PLAYBOOK_OPTIONS

    opts = {o.name: o.default for o in PLAYBOOK_OPTIONS}
    opts.update(inventory=args.inventory or env_inventory(), extra_vars=list(args.extra_vars), connection=args.connection,
                limit=args.limit, check=args.check, diff=args.diff, forks=args.forks, verbose=args.verbose,
                user=args.user, become=args.become, become_user=args.become_user, private_key=args.private_key,
                ask_become_pass=args.ask_become_pass, vault_password_file=args.vault_password_file,
                syntax_check=args.syntax_check, list_hosts=args.list_hosts, list_tasks=args.list_tasks,
                list_tags=args.list_tags, start_at_task=args.start_at_task, flush_cache=args.flush_cache,
                force_handlers=args.force_handlers,
                tags=",".join(args.tags) or None, skip_tags=",".join(args.skip_tags) or None)
    if args.lock_wait is not None:
        opts["lock_wait"] = args.lock_wait
    return opts


def run(argv: list[str]) -> int:
    """One ansible-playbook command line, run here: its exit code (ansible-playbook's: 0, 2 failed, 4 refused)."""
    args, unknown = parser().parse_known_args(argv)
    if unknown:
        print(f"ERROR: ansible-playbook flags the engine has no counterpart for: {' '.join(unknown)}", file=sys.stderr)
        return 4
    from invoke import Exit

    from dfp_cli.commands import run_play

    opts = options_of(args)
    for playbook in args.playbooks:
        try:
            run_play(playbook, opts)
        except Exit as exc:
            if exc.code:
                return int(exc.code)
        except KeyboardInterrupt:  # Ctrl-C: the run's workers stop their tasks as their stdin closes
            print("\n[ERROR]: interrupted (Ctrl-C)", file=sys.stderr)
            return 130
    return 0
