"""Rolling through a fleet: the batches of a play with `serial`, and when a failed batch stops the roll.

As in Ansible (playbook_executor._get_serialized_batches and pct_to_int): `serial` is a list of batch sizes,
the last one repeating until every host has had its batch. A size is a number of hosts (0: every host left,
in one batch) or a percentage of the play's hosts, rounded down but at least one host ("0%" is one host).
A batch that fails stops the roll: with max_fail_percentage, when the failed share of the batch EXCEEDS it
(0: the first failure stops it; 50 with batches of 4: three failures do, two do not); a batch whose every
host failed stops it always (100 included). Unreachable hosts count as failed. The runner (engine/run/runner.py) runs the
batches and records what the roll left untouched.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any, Callable

from engine.errors import UserError
from engine.template.markers import is_template

PERCENT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*%\s*")
WHOLE = re.compile(r"\s*(\d+)\s*")


def checked_size(value: Any, where: str, written: Any) -> int | str:
    """One batch size as the runner uses it: an int >= 0 or a normalised "N%"; anything else is refused."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and WHOLE.fullmatch(value):
        return int(value)
    if isinstance(value, str) and PERCENT.fullmatch(value):
        return f"{PERCENT.fullmatch(value).group(1)}%"  # type: ignore[union-attr]
    origin = f" (from {written!r})" if written is not value else ""
    raise UserError(
        f"{where}: serial: {value!r}{origin} is not a batch size. Write a whole number of hosts >= 0 (0: all the "
        "hosts left, in one batch), a percentage of the play's hosts like '25%', or a list of those (growing "
        "batches, the last one repeats), e.g. -e rolling_batch=2, -e rolling_batch=25% or "
        "-e 'rolling_batch=[1, \"25%\"]'.")


def resolve_serial(items: list, render: Callable[[str], Any], where: str) -> list[int | str]:
    """The play's serial list with its templates rendered (a template giving a list adds each of its items)."""
    out: list[int | str] = []
    for item in items:
        value = item
        if isinstance(item, str) and is_template(item):
            try:
                value = render(item)
            except Exception as exc:  # undefined variable, refused template: a user error, before any host
                raise UserError(f"{where}: serial: cannot render {item!r}: {exc}. Define the variable (play vars "
                                "or -e, e.g. -e rolling_batch=1) or write the batch size itself.") from None
        for v in value if isinstance(value, list) else [value]:
            out.append(checked_size(v, where, item))
    if not out:
        raise UserError(f"{where}: serial: the list of batch sizes is empty; give at least one, e.g. "
                        "-e rolling_batch=1 or serial: [1, '25%']")
    return out


def size_of(item: int | str, total: int) -> int:
    """A batch size in hosts: a percentage of `total` rounded down, at least 1 (exact, not float, arithmetic)."""
    if isinstance(item, str):
        m = PERCENT.fullmatch(item)
        if m:
            return max(1, math.floor(Decimal(m.group(1)) * total / 100))
        return int(item)
    return item


def split_batches(hosts: list, serial: list[int | str] | None) -> list[list]:
    """The hosts in the batches `serial` asks for, in order; None or an empty list: one batch of every host."""
    left = list(hosts)
    if not serial:
        return [left] if left else []
    total, batches, index = len(left), [], 0
    while left:
        size = size_of(serial[min(index, len(serial) - 1)], total)
        if size <= 0:  # 0: all the hosts left
            batches.append(left)
            break
        batches.append(left[:size])
        left = left[size:]
        index += 1
    return batches


def batch_sizes(serial: list[int | str] | None, host_count: int) -> list[int]:
    """The sizes of the batches `serial` makes of `host_count` hosts."""
    return [len(b) for b in split_batches(list(range(host_count)), serial)]


def roll_stops(batch_size: int, failed: int, max_fail_percentage: float | None) -> bool:
    """True when a batch with `failed` failed (or unreachable) hosts stops the roll."""
    if batch_size <= 0 or failed <= 0:
        return False
    if failed >= batch_size:  # a batch that failed whole stops the roll whatever max_fail_percentage says
        return True
    return max_fail_percentage is not None and failed * 100 > max_fail_percentage * batch_size  # strictly more


def host_list(hosts: list[str], limit: int = 20) -> str:
    """Host names for a message: the first `limit`, then how many more."""
    shown = ", ".join(hosts[:limit])
    return (shown + f" (+{len(hosts) - limit} more)" if len(hosts) > limit else shown) or "none"


def roll_summary(play: str, number: int, total: int, failed_now: int, batch_len: int, max_fail: float | None,
                 done: list[str], failed: list[str], untouched: list[str], later_plays: list[str]) -> str:
    """One paragraph: why the roll stopped, which hosts were done, which failed, which were never touched."""
    rule = ("the whole batch" if failed_now >= batch_len else
            f"{failed_now * 100 / batch_len:.4g}%, more than max_fail_percentage {max_fail:g}%")
    text = (f"Rolling update of play '{play}' stopped after batch {number} of {total}: {failed_now} of {batch_len} "
            f"hosts failed ({rule}). Done: {host_list(done)}. Failed: {host_list(failed)}. Not touched (never "
            f"connected): {host_list(untouched)}.")
    if later_plays:
        text += f" Plays not run: {', '.join(later_plays)}."
    rest = failed + untouched
    if rest:
        how = f"--limit '{','.join(rest)}'" if len(rest) <= 20 else "--limit naming the failed and untouched hosts"
        text += f" Fix the failure, then go on with {how}."
    return text
