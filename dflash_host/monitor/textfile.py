"""The agent's Prometheus textfile, <textfile dir>/dflash_host.prom, beside the speed figures' dflash.prom.

Written whole and renamed into place (files.atomic_write: a scrape never sees half a file), in
prom_textfile's format (its sample formatter, gauges, `dflash_` names); a file there that is not the tool's
(state.is_our_textfile: every line a dflash_ sample or its comment) is refused, never replaced. No `host`
label: the scrape's target carries the inventory's (invoke monitoring's node targets), which the alerts join on.
No timestamp either: node_exporter's node_textfile_mtime_seconds says when the file was last written, and a
reading that did not change writes the same text (a second run of library/host_metrics changes nothing).
"""

from __future__ import annotations

import os
from typing import Any

from dflash_host.speed.prom_textfile import gauges, sample
from dflash_host.speed.state import write_our_textfile

TEXTFILE_NAME = "dflash_host.prom"
HELP = {
    "dflash_gpu_memory_used_mib": "GPU memory in use (MiB) per GPU, from nvidia-smi",
    "dflash_gpu_memory_total_mib": "GPU memory (MiB) per GPU, from nvidia-smi",
    "dflash_gpu_driver_up": "1 when nvidia-smi answered within the agent's deadline, else 0",
    "dflash_server_running": "1 while the tool's own vLLM server runs (its pidfile or unit), else 0",
    "dflash_running_num_speculative_tokens": "k the running server was started with (0: no drafter)",
    "dflash_running_schedule_num_speculative_tokens": "k per batch-size band of the running server (tune's schedule)",
}


def _gpu_samples(name: str, key: str, gpus: list) -> list:
    return [sample(name, {"gpu": g["index"], "uuid": g["uuid"]}, g[key]) for g in gpus]


def _schedule_samples(schedule: Any) -> list:
    name = "dflash_running_schedule_num_speculative_tokens"
    return [sample(name, {"batch_size_min": b[0], "batch_size_max": b[1]}, b[2])
            for b in schedule or [] if isinstance(b, list) and len(b) == 3]


def render(reading: dict) -> str:
    """The textfile's text for one reading (readings.read)."""
    samples = {
        "dflash_gpu_memory_used_mib": _gpu_samples("dflash_gpu_memory_used_mib", "used_mib", reading["gpus"]),
        "dflash_gpu_memory_total_mib": _gpu_samples("dflash_gpu_memory_total_mib", "total_mib", reading["gpus"]),
        "dflash_gpu_driver_up": [sample("dflash_gpu_driver_up", {}, int(reading["driver_up"]))],
        "dflash_server_running": [sample("dflash_server_running", {}, None if reading["server_running"] is None
                                          else int(reading["server_running"]))],
        "dflash_running_num_speculative_tokens": [sample("dflash_running_num_speculative_tokens", {}, reading["k"])],
        "dflash_running_schedule_num_speculative_tokens": _schedule_samples(reading["schedule"]),
    }
    return gauges(HELP, samples)


def write(folder: str, reading: dict, touch: bool = False) -> tuple:
    """(path, changed) of <folder>/dflash_host.prom, written atomically when its text changes (or always, with
    `touch`: the looping agent's file then shows its freshness by its mtime). A file that is not the tool's is refused."""
    path = os.path.join(folder, TEXTFILE_NAME)
    fix = "give the agent another --textfile-dir (prometheus_textfile_dir)"
    return path, write_our_textfile(path, render(reading), fix, touch)
