"""The batch plans of playbooks/restart-server.yaml and rebuild.yaml: their serial renders from the play's
rolling_batch, -e wins, and any failure stops the roll (max_fail_percentage 0)."""

from __future__ import annotations

import pytest

from engine.inventory.manager import Inventory
from engine.playbook.modulespec import PROJECT_ROOT
from engine.playbook.plays import load_playbook
from engine.run.batches import batch_sizes
from engine.run.runner import Runner


def plan(playbook: str, hosts: int, extra_vars: dict | None = None) -> list[int]:
    inventory = Inventory(data={"all": {"hosts": {f"h{i}": {"ansible_connection": "local"} for i in range(hosts)}}})
    (play,) = load_playbook(PROJECT_ROOT / "playbooks" / playbook)
    assert play.max_fail_percentage == 0
    return batch_sizes(Runner(inventory, extra_vars=extra_vars).serial_for(play), hosts)


@pytest.mark.parametrize("playbook", ["restart-server.yaml", "rebuild.yaml"])
@pytest.mark.parametrize(
    ("hosts", "extra_vars", "sizes"),
    [
        (1, None, [1]),
        (9, None, [1, 2, 2, 2, 2]),  # a canary, then a quarter (rounded down) at a time
        (40, None, [1, 10, 10, 10, 9]),
        (9, {"rolling_batch": 3}, [3, 3, 3]),
        (9, {"rolling_batch": "50%"}, [4, 4, 1]),
        (9, {"rolling_batch": [2, 0]}, [2, 7]),
        (9, {"rolling_batch": 0}, [9]),
    ],
)
def test_rolling_batch_plans(playbook, hosts, extra_vars, sizes):
    assert plan(playbook, hosts, extra_vars) == sizes
