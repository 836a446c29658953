"""A task past its timeout is stopped with everything it started: a descendant in a session of its own
(`setsid x &`), orphaned when its parent is killed, is still found (the worker is a child subreaper) and stopped;
what earlier tasks started (a server) is left running."""

from __future__ import annotations

import time

import psutil
import yaml

from engine.api import run_playbook

INV = {"all": {"hosts": {"h": {"ansible_connection": "local"}}}}


def alive(marker: str) -> list:
    return [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]


def test_a_timed_out_task_leaves_no_descendant_and_earlier_ones_keep_theirs(tmp_path):
    keep, escape, child = "7771.5", "7772.5", "7773.5"
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "a server of an earlier task", "command": {"argv": ["sh", "-c", f"setsid sleep {keep} > /dev/null 2>&1 &"]}},
        {"name": "escape", "command": {"argv": ["sh", "-c", f"setsid sleep {escape} & sleep {child}"]}, "timeout": 2,
         "ignore_errors": True},
    ]}]))
    try:
        res = run_playbook(str(book), inventory=INV)
        timed = res.find("escape", "h")[0]
        assert timed.status == "failed" and timed.result.get("timed_out"), timed.msg
        time.sleep(0.2)
        assert not alive(f"sleep {escape}") and not alive(f"sleep {child}")
        assert len(timed.result["stopped_pids"]) >= 2
        assert alive(f"sleep {keep}")  # started by an earlier task: not the timed-out task's to stop
    finally:
        for p in alive(f"sleep {keep}") + alive(f"sleep {escape}") + alive(f"sleep {child}"):
            p.kill()
