"""Batch sizes and the stop rule of a rolling play (engine/run/batches.py), as Ansible computes them."""

from __future__ import annotations

import pytest

from engine.errors import UserError
from engine.run.batches import batch_sizes, resolve_serial, roll_stops, roll_summary, split_batches


@pytest.mark.parametrize(
    ("serial", "hosts", "sizes"),
    [
        ([1], 5, [1, 1, 1, 1, 1]),
        ([2], 5, [2, 2, 1]),  # the last batch takes what is left
        (["25%"], 9, [2, 2, 2, 2, 1]),  # 2.25 rounds down
        (["25%"], 3, [1, 1, 1]),  # 0.75 rounds down to 0: at least one host
        (["0%"], 3, [1, 1, 1]),  # as Ansible's pct_to_int: 0% is one host
        (["50%"], 9, [4, 4, 1]),
        (["100%"], 4, [4]),
        (["150%"], 4, [4]),
        (["12.5%"], 16, [2] * 8),
        (["29%"], 100, [29, 29, 29, 13]),  # exact arithmetic (0.29 * 100 in floats is 28.99...)
        ([1, "50%"], 9, [1, 4, 4]),  # the last item repeats; percentages are of every host of the play
        ([1, 2, 0], 9, [1, 2, 6]),  # 0: every host left, in one batch
        ([0], 4, [4]),
        (None, 4, [4]),
        ([], 4, [4]),
        ([10], 3, [3]),  # a batch larger than the play
        ([1, 1, 1, 1, 1], 2, [1, 1]),  # more batches asked for than hosts
        ([3, 1], 2, [2]),
        ([2], 0, []),
        (["25%"], 1, [1]),
    ],
)
def test_batch_sizes(serial, hosts, sizes):
    assert batch_sizes(serial, hosts) == sizes


def test_split_batches_keeps_the_inventory_order():
    assert split_batches(["h1", "h2", "h3", "h4", "h5"], [1, "40%"]) == [["h1"], ["h2", "h3"], ["h4", "h5"]]


def render_with(values: dict):
    """A renderer for resolve_serial: the real Templar over plain variables."""
    from engine.template.environment import environment
    from engine.template.templar import Templar

    templar = Templar(environment())
    return lambda item: templar.render_value(item, templar.view(values))


@pytest.mark.parametrize(
    ("serial", "values", "expected"),
    [
        (["{{ rolling_batch }}"], {"rolling_batch": 2}, [2]),
        (["{{ rolling_batch }}"], {"rolling_batch": "25%"}, ["25%"]),
        (["{{ rolling_batch }}"], {"rolling_batch": [1, "25%"]}, [1, "25%"]),  # a list from -e splices in
        (["{{ rolling_batch }}"], {"rolling_batch": "3"}, [3]),
        ([1, "{{ n }}%"], {"n": 30}, [1, "30%"]),
        ([" 5 % "], {}, ["5%"]),
    ],
)
def test_resolve_serial_renders_templates(serial, values, expected):
    assert resolve_serial(serial, render_with(values), "pb.yaml: play 'p'") == expected


@pytest.mark.parametrize("value", ["abc", -1, True, 2.5, "x%", "-5%", [], None, {"a": 1}])
def test_resolve_serial_refuses_what_is_not_a_batch_size(value):
    with pytest.raises(UserError) as exc:
        resolve_serial(["{{ b }}"], render_with({"b": value}), "pb.yaml: play 'p'")
    text = str(exc.value)
    assert text.startswith("pb.yaml: play 'p': serial:") and "rolling_batch" in text


def test_resolve_serial_names_an_undefined_variable():
    with pytest.raises(UserError) as exc:
        resolve_serial(["{{ rolling_batch }}"], render_with({}), "pb.yaml: play 'p'")
    assert "rolling_batch" in str(exc.value) and "-e rolling_batch=1" in str(exc.value)


@pytest.mark.parametrize(
    ("size", "failed", "max_fail", "stops"),
    [
        (4, 0, 0, False),
        (4, 1, 0, True),  # 25% > 0%
        (4, 2, 50, False),  # 50% does not exceed 50%
        (4, 3, 50, True),
        (4, 2, 49, True),  # Ansible's docs: 49 to stop at 2 of 4
        (3, 1, 33.3, True),
        (3, 1, 34, False),
        (4, 3, None, False),  # without max_fail_percentage only a whole failed batch stops the roll
        (4, 4, None, True),
        (2, 2, 100, True),  # a whole failed batch stops it whatever the percentage
        (2, 1, 100, False),
        (0, 0, 0, False),
    ],
)
def test_roll_stops(size, failed, max_fail, stops):
    assert roll_stops(size, failed, max_fail) is stops


def test_roll_summary_names_done_failed_and_untouched_hosts():
    msg = roll_summary("restart", 2, 4, 1, 2, 0.0, ["h1", "h2", "h4"], ["h3"], ["h5", "h6"], ["later"])
    assert "stopped after batch 2 of 4: 1 of 2 hosts failed (50%, more than max_fail_percentage 0%)" in msg
    assert "Done: h1, h2, h4." in msg and "Failed: h3." in msg and "Not touched (never connected): h5, h6." in msg
    assert "Plays not run: later." in msg and "--limit 'h3,h5,h6'" in msg
