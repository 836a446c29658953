"""The benchmark's headline figures: which keys results.json must hold, their targets and verdicts.

Shared by the run (bench/run.py), the workload timing (bench/side_by_side.py) and the markdown
(bench/render.py), so that a figure's name and target are written down once.
"""

from __future__ import annotations

REQUIRED_KEYS = (
    "ansible_ratio_1",
    "ansible_ratio_8",
    "pyinfra_ratio_1",
    "pyinfra_ratio_8",
    "floor_ratio_1",
    "fanout_ratio_8",
    "reprovision_s",
    "ready_latency_s",
    "crash_latency_s",
    "header_ms",
    "cold_overhead_s",
    "fleet_100_wall_s",
    "fleet_100_control_cpu_s",
)
# The required figures that come from the side-by-side workload runs (sections "peers").
WORKLOAD_KEYS = REQUIRED_KEYS[:6]
# The section that measures each of the other required figures.
SECTION_OF = {
    "header_ms": "header",
    "reprovision_s": "reprovision",
    "cold_overhead_s": "cold",
    "ready_latency_s": "latency",
    "crash_latency_s": "latency",
    "fleet_100_wall_s": "fleet",
    "fleet_100_control_cpu_s": "fleet",
}
# (key, target, "max" means the figure must be at most the target)
TARGETS = {
    "ansible_ratio_1": 0.1,
    "ansible_ratio_8": 0.1,
    "pyinfra_ratio_1": 1 / 3,
    "pyinfra_ratio_8": 1 / 3,
    "fanout_ratio_8": 1.5,
    "host_cpu_ms_8": 30.0,
    "cli_start_s": 0.1,
    "invoke_list_s": 0.1,
    "reprovision_s": 2.0,
    "ready_latency_s": 0.5,
    "crash_latency_s": 1.0,
    "header_ms": 50.0,
    "cold_overhead_s": 5.0,
    "fleet_100_control_cpu_s": 2.0,
    "fleet_host_cpu_per_host_ms": 30.0,
    "models_relay_upstream_ratio": 1 / 8,
    "models_recheck_s": 2.0,
    "targets_no_change_ansible_ratio": 0.1,  # issue 38: the no-change run of the targets at least 10x faster
}


def verdict(key: str, value) -> str:
    """"met", "MISSED" or "not measured" for a figure with a target; "" for one without."""
    if key not in TARGETS:
        return ""
    if value is None:
        return "not measured"
    return "met" if value <= TARGETS[key] + 1e-9 else "MISSED"
