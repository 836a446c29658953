"""Rolling through a fleet on real sshd hosts: batches run whole one after another, a failed batch stops the
roll and the hosts after it are never connected (no host lock, no marker), and the run names the hosts done,
failed and not touched. Also the real restart-server playbook (in check mode) rolling with -e rolling_batch.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
import yaml

from engine.api import run_playbook
from engine.connection.hostlock import LOCK_NAME
from engine.report.console import Console

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ssh


@pytest.fixture
def fleet(ssh_hosts, inventory_file, shared_tmp):
    """Six sshd hosts h1..h6, each with its own dfp_root (where its host lock lives), and a folder for markers."""
    hosts = ssh_hosts[:6]
    roots = {h.name: shared_tmp / h.name for h in hosts}
    inv = inventory_file(hosts=hosts, host_vars={name: {"dfp_root": str(root)} for name, root in roots.items()})
    marks = shared_tmp / "marks"
    marks.mkdir()
    os.chmod(marks, 0o777)
    return inv, roots, marks


def marker(marks: Path, what: str) -> dict:
    """A command writing <marks>/<host>.<what> with the time it ran (ns)."""
    return {"argv": ["sh", "-c", f"date +%s%N > {marks}/{{{{ inventory_hostname }}}}.{what}"]}


def roll_playbook(path: Path, marks: Path, serial, max_fail=None, fail_on=(), more_plays=False) -> Path:
    """One play: a start marker (notifying a handler that writes one more), a command failing on the hosts
    `fail_on`, an end marker."""
    play = {
        "name": "roll",
        "hosts": "all",
        "gather_facts": False,
        "serial": serial,
        "tasks": [
            {"name": "start", "command": marker(marks, "start"), "notify": "handler"},
            {"name": "fail on some hosts", "command": {"argv": ["sh", "-c", "exit 1"]},
             "when": f"inventory_hostname in {list(fail_on)}"},
            {"name": "end", "command": marker(marks, "end")},
        ],
        "handlers": [{"name": "handler", "command": marker(marks, "handler")}],
    }
    if max_fail is not None:
        play["max_fail_percentage"] = max_fail
    plays = [play]
    if more_plays:
        plays.append({"name": "after", "hosts": "all", "gather_facts": False,
                      "tasks": [{"name": "after", "command": marker(marks, "after")}]})
    path.write_text(yaml.safe_dump(plays))
    return path


def stamp(marks: Path, host: str, what: str) -> int | None:
    f = marks / f"{host}.{what}"
    return int(f.read_text()) if f.exists() else None


def run(pb: Path, inv: Path, **kw):
    out = io.StringIO()
    res = run_playbook(pb, inv, console=Console(stream=out), forks=8, **kw)
    return res, out.getvalue()


def test_a_failed_second_batch_stops_the_roll_and_leaves_the_rest_untouched(tmp_path, fleet):
    inv, roots, marks = fleet
    report = tmp_path / "report.json"
    pb = roll_playbook(tmp_path / "roll.yaml", marks, [1, 2], max_fail=0, fail_on=["h3"], more_plays=True)
    res, out = run(pb, inv, report=str(report))

    assert res.exit_code == 2, out
    # batch 1 (h1) finished every task and its handler before batch 2 (h2, h3) started
    assert max(stamp(marks, "h1", w) for w in ("start", "end", "handler")) < min(
        stamp(marks, h, "start") for h in ("h2", "h3"))
    assert stamp(marks, "h2", "handler") is not None and stamp(marks, "h3", "end") is None
    # h4..h6 never connected: no marker, no host lock (the worker takes it first), no result but the roll's
    for host in ("h4", "h5", "h6"):
        assert not list(marks.glob(f"{host}.*")) and not (roots[host] / LOCK_NAME).exists()
        assert [(r.task, r.status) for r in res.results if r.host == host] == [("Rolling update", "skipped")]
    assert (roots["h1"] / LOCK_NAME).exists()
    assert not list(marks.glob("*.after"))  # the play after a stopped roll does not run (as in Ansible)
    msg = res.find("Rolling update", "h4")[0].msg
    assert "stopped after batch 2 of 4: 1 of 2 hosts failed (50%, more than max_fail_percentage 0%)" in msg
    assert "Done: h1, h2. Failed: h3. Not touched (never connected): h4, h5, h6. Plays not run: after." in msg
    assert "--limit 'h3,h4,h5,h6'" in msg
    # the console shows each batch and the summary; the JSON report holds it per untouched host
    assert "PLAY [roll (batch 1 of 4: h1)]" in out and "PLAY [roll (batch 2 of 4: h2, h3)]" in out
    assert "PLAY [roll (batch 3" not in out and msg in out
    data = json.loads(report.read_text())
    assert [t["host"] for t in data["tasks"] if t["task"] == "Rolling update"] == ["h4", "h5", "h6"]
    assert data["recap"]["h5"]["skipped"] == 1 and data["recap"]["h3"]["failed"] == 1
    roll = data["rolling"][0]  # a job reads the roll without parsing messages
    assert (roll["done"], roll["failed"], roll["untouched"], roll["stopped"]) == (["h1", "h2"], ["h3"], ["h4", "h5", "h6"], True)
    assert res.rolls == data["rolling"]


@pytest.mark.parametrize(
    ("max_fail", "stops"),
    [(34, False), (33, True), (None, False)],  # 1 of 3 is 33.3%: stops only above the percentage
)
def test_max_fail_percentage_is_a_share_of_the_batch(tmp_path, fleet, max_fail, stops):
    inv, roots, marks = fleet
    pb = roll_playbook(tmp_path / "roll.yaml", marks, "50%", max_fail=max_fail, fail_on=["h2"])
    res, out = run(pb, inv)

    assert res.exit_code == 2, out
    second = ("h4", "h5", "h6")
    ran = [h for h in second if stamp(marks, h, "end") is not None]
    assert ran == ([] if stops else list(second)), out
    assert bool(res.find("Rolling update")) is stops


def test_without_max_fail_percentage_a_whole_failed_batch_stops_the_roll(tmp_path, fleet):
    inv, roots, marks = fleet
    pb = roll_playbook(tmp_path / "roll.yaml", marks, [2], fail_on=["h3", "h4"])
    res, out = run(pb, inv)

    assert res.exit_code == 2, out
    assert [r.host for r in res.find("Rolling update")] == ["h5", "h6"]
    assert "2 of 2 hosts failed (the whole batch)" in res.find("Rolling update")[0].msg
    assert not (roots["h5"] / LOCK_NAME).exists()


def test_an_unreachable_host_counts_as_failed(tmp_path, ssh_hosts, inventory_file, shared_tmp):
    """h2 listens nowhere (port 1): its batch fails, the roll stops, exit 3 (unreachable, none failed)."""
    hosts = ssh_hosts[:4]
    roots = {h.name: shared_tmp / h.name for h in hosts}
    host_vars = {name: {"dfp_root": str(root)} for name, root in roots.items()}
    host_vars["h2"]["ansible_port"] = 1
    inv = inventory_file(hosts=hosts, host_vars=host_vars)
    marks = shared_tmp / "marks"
    marks.mkdir()
    os.chmod(marks, 0o777)
    pb = roll_playbook(tmp_path / "roll.yaml", marks, [1, 2], max_fail=0)
    res, out = run(pb, inv)

    assert res.exit_code == 3, out
    assert [r.host for r in res.find("Rolling update")] == ["h4"]
    assert stamp(marks, "h3", "end") is not None and stamp(marks, "h4", "start") is None


def check_restart(inv: Path, **extra):
    """The real restart-server playbook in check mode (changes nothing; needs no vLLM), with a stand-in nvidia-smi."""
    out = io.StringIO()
    extra_vars = {"nvidia_smi": str(ROOT / "tests" / "fakes" / "nvidia-smi"), **extra}
    res = run_playbook(ROOT / "playbooks" / "restart-server.yaml", inv, check=True, extra_vars=extra_vars,
                       console=Console(stream=out))
    return res, out.getvalue()


@pytest.fixture
def five(ssh_hosts, inventory_file, shared_tmp):
    hosts = ssh_hosts[:5]
    return inventory_file(hosts=hosts, host_vars={h.name: {"dfp_root": str(shared_tmp / h.name)} for h in hosts})


@pytest.mark.parametrize(
    ("extra", "banners"),
    [
        ({}, ["batch 1 of 5: h1)", "batch 2 of 5: h2)", "batch 5 of 5: h5)"]),  # default [1, '25%'] of 5 hosts
        ({"rolling_batch": 2}, ["batch 1 of 3: h1, h2)", "batch 3 of 3: h5)"]),
        ({"rolling_batch": "40%"}, ["batch 1 of 3: h1, h2)", "batch 2 of 3: h3, h4)"]),
        ({"rolling_batch": [1, 0]}, ["batch 1 of 2: h1)", "batch 2 of 2: h2, h3, h4, h5)"]),
    ],
)
def test_restart_server_rolls_in_batches_set_by_rolling_batch(five, extra, banners):
    res, out = check_restart(five, **extra)
    assert res.exit_code == 0, out
    for banner in banners:
        assert f"PLAY [restart-server ({banner}]" in out


def test_restart_server_all_at_once_with_rolling_batch_0(five):
    res, out = check_restart(five, rolling_batch=0)
    assert res.exit_code == 0, out
    assert "PLAY [restart-server]" in out and "batch" not in out


def test_restart_server_stops_the_roll_at_a_host_it_cannot_restart(ssh_hosts, inventory_file, shared_tmp):
    """h3's pidfile is no pidfile record: the stop refuses it (check mode too), so batch 2 fails."""
    hosts = ssh_hosts[:5]
    host_vars = {h.name: {"dfp_root": str(shared_tmp / h.name)} for h in hosts}
    run_dir = shared_tmp / "h3" / "run"
    run_dir.mkdir(parents=True)
    for d in (run_dir, run_dir.parent):
        os.chmod(d, 0o777)
    (run_dir / "vllm.pid").write_text("not a pidfile record\n")
    inv = inventory_file(hosts=hosts, host_vars=host_vars)
    res, out = check_restart(inv, rolling_batch=2)
    assert res.exit_code == 2, out
    assert [r.host for r in res.find("Rolling update")] == ["h5"]
    assert "Done: h1, h2, h4. Failed: h3. Not touched (never connected): h5." in res.find("Rolling update")[0].msg


def test_a_bad_rolling_batch_is_refused_before_any_host(five, shared_tmp):
    res, _ = check_restart(five, rolling_batch="a quarter")
    assert res.exit_code == 4
    assert "restart-server.yaml: play 'restart-server': serial: 'a quarter' (from '{{ rolling_batch }}')" in res.error
    assert not any(shared_tmp.iterdir())  # no host lock anywhere: nothing was touched

