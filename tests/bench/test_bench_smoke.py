"""The benchmark's code paths work: pure helpers as tables, and a --quick run of its pieces on 1-2 real
sshd hosts with one repetition. Never a timing assertion: figures on a shared machine are noise here.
"""

from __future__ import annotations

import json
import os

import pytest

from bench import peers
from bench.figures import REQUIRED_KEYS, verdict
from bench.provision import classify_cold_task, host_time
from bench.render import render_block, update_doc
from bench.run import main
from bench.side_by_side import host_cpu_per_host, no_change, summarize
from bench.timing import ratio, stats
from tests import sshd_harness


def _stats(median: float) -> dict:
    return {"min": median, "median": median, "n": 1, "samples": [median]}


@pytest.mark.parametrize(
    "output, expected",
    [
        ("h1 : ok=11  changed=0  failed=0\nh2 : ok=11  changed=0  failed=0", True),
        ("h1                         : ok=11   changed=0    unreachable=0", True),
        ("h1 : ok=10  changed=1  failed=0\nh2 : ok=11  changed=0  failed=0", False),
        ("no recap at all", False),
        ("changed=0", True),
    ],
)
def test_no_change_reads_every_hosts_recap(output, expected):
    assert no_change(output) is expected


@pytest.mark.parametrize(
    "a, b, expected",
    [(1.0, 4.0, 0.25), (None, 4.0, None), (1.0, None, None), (1.0, 0.0, None), (2.0, 3.0, 0.667)],
)
def test_ratio_is_none_when_a_side_is_missing(a, b, expected):
    assert ratio(a, b) == expected


def test_stats_give_min_and_median_and_nothing_for_no_samples():
    assert stats([0.3, 0.1, 0.2])["min"] == 0.1 and stats([0.3, 0.1, 0.2])["median"] == 0.2
    assert stats([]) == {"min": None, "median": None, "n": 0, "samples": []}


def test_summary_ratios_come_from_the_medians_of_the_cli_runs():
    timings = {
        "ours_cli": {"1": _stats(0.5), "8": _stats(0.75), "16": _stats(1.0)},
        "ansible": {"1": _stats(5.0), "8": _stats(20.0)},
        "pyinfra": {"1": _stats(1.5)},
        "fabric": {"1": _stats(0.4), "8": _stats(0.6)},
    }
    out = summarize(timings)
    assert out["ansible_ratio_1"] == 0.1 and out["ansible_ratio_8"] == 0.037
    assert out["pyinfra_ratio_1"] == 0.333 and out["pyinfra_ratio_8"] is None
    assert out["floor_ratio_1"] == 1.25 and out["fanout_ratio_8"] == 1.5 and out["fanout_ratio_16"] == 2.0
    assert out["fanout_ratio_8_in_process"] is None
    assert out["pyinfra_ratio_1_direct"] is None and out["fanout_ratio_8_direct"] is None


def test_direct_connection_ratios_come_from_the_direct_cli_runs():
    timings = {"ours_cli": {"1": _stats(0.3), "8": _stats(0.42)}, "ours_direct": {"1": _stats(0.5), "8": _stats(0.8)},
               "pyinfra": {"1": _stats(1.2), "8": _stats(2.0)}}
    out = summarize(timings)
    assert out["pyinfra_ratio_1_direct"] == 0.417 and out["pyinfra_ratio_8_direct"] == 0.4
    assert out["fanout_ratio_8_direct"] == 1.6 and out["fanout_ratio_8"] == 1.4


def test_the_clis_own_cost_is_the_cli_run_less_the_same_run_in_process():
    timings = {"ours_cli": {"1": _stats(0.17)}, "ours_in_process": {"1": _stats(0.02)}, "invoke_list": {"1": _stats(0.09)}}
    out = summarize(timings)
    assert out["cli_start_s"] == 0.15 and out["invoke_list_s"] == 0.09
    assert verdict("cli_start_s", out["cli_start_s"]) == "MISSED" and verdict("invoke_list_s", 0.09) == "met"
    assert summarize({"ours_cli": {"1": _stats(0.17)}})["cli_start_s"] is None


def test_hosts_cpu_per_host_is_per_host_of_the_cli_runs():
    cpu = {"ours_cli": {"8": {"control_cpu_s": 0.4, "host_cpu_s": 0.48}}, "ours_direct": {"1": {"host_cpu_s": 0.01}}}
    assert host_cpu_per_host(cpu, 8) == {"host_cpu_ms_8": 60.0, "host_cpu_ms_8_direct": None}


@pytest.mark.parametrize(
    "role, task, part",
    [
        ("venv", "Build the serving environment", "install"),
        ("flash-attn-pinning", "Pin flash-attn", "install"),
        ("tiny-models", "Write the tiny target", "generate"),
        (None, "Generate the tiny models", "generate"),
        ("vllm-service", "Start vLLM and wait until it is ready", "vllm"),
        ("gpu-cleanup", "Free the GPU", "other"),
        (None, "Gathering facts", "other"),
    ],
)
def test_cold_provision_tasks_are_split_into_install_generate_and_vllm(role, task, part):
    assert classify_cold_task(role, task) == part


def test_host_time_adds_module_durations_including_loop_items():
    results = [{"_duration_s": 0.5}, {"results": [{"_duration_s": 0.25}, {"_duration_s": 0.25}]}, {"msg": "action"}]
    assert host_time(results) == 1.0


def _result(**over) -> dict:
    res = {k: None for k in REQUIRED_KEYS}
    res.update(
        mode="quick",
        command="invoke bench --quick",
        date="2026-11-30",
        duration_s=1.0,
        machine={"cpus": 2, "python": "3.11", "load_avg_at_end": [0.1]},
        notes={"cold_overhead_s": "skipped"},
        details={},
    )
    res.update(over)
    return res


def test_the_results_block_replaces_only_its_own_mode_and_keeps_the_hand_written_text(tmp_path):
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text("# Benchmarks\n\nWritten by hand.\n")
    update_doc(_result(header_ms=0.5), doc)
    update_doc(_result(mode="full", command="invoke bench", header_ms=0.7), doc)
    update_doc(_result(header_ms=0.4), doc)
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nWritten by hand.\n")
    assert text.count("<!-- bench-results:quick:begin -->") == 1 and text.count("<!-- bench-results:full:begin -->") == 1
    assert "| 0.400 |" in text and "| 0.700 |" in text and "| 0.500 |" not in text
    assert "`invoke bench --quick`" in render_block(_result())


def test_each_tool_keeps_its_own_folder_on_the_host():
    bases = {peers.workload_base("/home/u", t) for t in ("ours", "ansible", "pyinfra", "fabric")}
    assert len(bases) == 4


def _need_sshd() -> None:
    reason = sshd_harness.available()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the benchmark smoke test: {reason}")
        pytest.skip(reason)


@pytest.mark.slow
@pytest.mark.ssh
def test_quick_pieces_on_two_hosts_write_every_required_key(tmp_path):
    _need_sshd()
    out = tmp_path / "results.json"
    argv = ["--quick", "--reps", "1", "--hosts", "1,2", "--tools", "ours,fabric", "--only", "peers,header,latency"]
    assert main([*argv, "--out", str(out), "--no-docs", "--first-octet", "180"]) == 0
    res = json.loads(out.read_text())
    for key in REQUIRED_KEYS:
        assert key in res
        assert res[key] is not None or key in res["notes"], f"{key} is null without a reason"
    workload = res["details"]["workload"]
    assert set(workload["ours_cli"]) == {"1", "2"} and set(workload["fabric"]) == {"1", "2"}
    assert res["floor_ratio_1"] is not None and res["fanout_ratio_8"] is None
    assert res["invoke_list_s"] > 0 and res["cli_start_s"] is not None and set(workload["invoke_list"]) == {"1"}
    assert res["details"]["header"]["ssh"]["module_header_bytes_read"] == res["details"]["header"]["drafter"]["header_bytes"]
    assert "ansible_ratio_1" in res["notes"] and "cold_overhead_s" in res["notes"]
    assert not any(k.endswith("_idempotent") for k in res["notes"]), res["notes"]
    assert res["details"]["latency"].get("why") is None or "does not exist" in res["details"]["latency"]["why"]


@pytest.mark.slow
@pytest.mark.ssh
def test_ansible_and_pyinfra_workloads_run_on_one_host_when_installed(tmp_path):
    _need_sshd()
    missing = [t for t in ("ansible", "pyinfra") if not (peers.VENVS / t / ".dfp-bench-installed").exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed yet: `invoke bench --quick` installs them (needs PyPI)")
    out = tmp_path / "results.json"
    argv = ["--quick", "--reps", "1", "--hosts", "1", "--tools", "ours,ansible,pyinfra", "--only", "peers"]
    assert main([*argv, "--out", str(out), "--no-docs", "--first-octet", "185"]) == 0
    res = json.loads(out.read_text())
    assert res["ansible_ratio_1"] is not None and res["pyinfra_ratio_1"] is not None, res["notes"]
    assert not any(k.endswith("_idempotent") for k in res["notes"]), res["notes"]


# -- the fleet section (bench/fleet.py) -------------------------------------------------------------


def test_fleet_summary_gives_medians_and_cpu_per_host():
    from bench.fleet import summarize_runs

    s = summarize_runs(100, [(5.0, 2.0, 4.0), (4.0, 1.0, 5.0), (6.0, 3.0, 6.0)])
    assert (s["wall_s"], s["control_cpu_s"], s["host_cpu_s"], s["wall_min_s"], s["n"]) == (5.0, 2.0, 5.0, 4.0, 3)
    assert s["control_cpu_per_host_ms"] == 20.0 and s["host_cpu_per_host_ms"] == 50.0


@pytest.mark.parametrize(
    "one, many, n, expected",
    [
        ({"control_cpu_s": 0.3}, {"control_cpu_s": 2.28}, 100, 20.0),
        (None, {"control_cpu_s": 2.0}, 100, None),
        ({"control_cpu_s": 0.3}, None, 100, None),
        ({"control_cpu_s": 0.3}, {"control_cpu_s": 0.3}, 1, None),
    ],
)
def test_marginal_cpu_per_host_leaves_out_the_fixed_start(one, many, n, expected):
    from bench.fleet import marginal_ms

    assert marginal_ms(one, many, n) == expected


def test_fleet_headline_keys_are_none_where_not_measured():
    from bench.fleet import headline, summarize_runs

    ours = {"1": summarize_runs(1, [(0.4, 0.3, 0.05)]), "100": summarize_runs(100, [(5.0, 1.8, 4.5)])}
    forks = {"8": summarize_runs(100, [(5.0, 1.8, 4.5)]), "100": summarize_runs(100, [(5.5, 2.2, 4.6)])}
    keys = headline(ours, forks)
    assert keys["fleet_100_wall_s"] == 5.0 and keys["fleet_100_control_cpu_s"] == 1.8
    assert keys["fleet_50_wall_s"] is None and keys["fleet_control_cpu_per_host_ms"] == 15.2
    assert keys["forks_100_wall_s"] == {"8": 5.0, "100": 5.5}
    assert headline({}, {})["forks_100_wall_s"] is None
    fleet = {"pool": "100 hosts", "repetitions": 1, "ours": ours, "forks": forks,
             "peers": {"pyinfra": {"100": summarize_runs(100, [(12.0, 6.0, 8.0)])}}}
    text = render_block(_result(details={"fleet": fleet}, **keys))
    assert "| pyinfra |" in text and "12.00 s" in text and "| 100 | 5.50 s | 2.20 s | 4.60 s |" in text


def test_fleet_direct_connection_keys_and_row():
    from bench.fleet import direct_headline, summarize_runs

    direct = {"100": summarize_runs(100, [(1.9, 1.5, 0.9), (1.7, 1.4, 0.8), (2.0, 1.6, 1.0)])}
    keys = direct_headline(direct)
    assert keys == {"fleet_100_wall_s_direct": 1.9, "fleet_100_control_cpu_s_direct": 1.5,
                    "fleet_host_cpu_per_host_ms_direct": 9.0}
    assert direct_headline({})["fleet_100_control_cpu_s_direct"] is None
    ours = {"100": summarize_runs(100, [(5.0, 1.8, 4.5)])}
    fleet = {"pool": "100 hosts", "repetitions": 3, "ours": ours, "direct": direct}
    text = render_block(_result(details={"fleet": fleet}, **keys))
    assert ("| ours, each run its own connections (ControlPersist=no) | 1.90 s; 1.50 + 0.90 s CPU (15 + 9 ms/host) |"
            in text)


@pytest.mark.slow
@pytest.mark.ssh
def test_a_light_pool_serves_many_addresses_from_few_daemons(tmp_path):
    """per_daemon=16 and reexec=False: 20 hosts on 2 sshd listeners, each address a real, checked SSH host."""
    _need_sshd()
    import subprocess

    pool = sshd_harness.SshdPool(count=20, first_octet=190, per_daemon=16, reexec=False).start()
    try:
        assert len({h.pid for h in pool.hosts}) == 2 and len({h.address for h in pool.hosts}) == 20
        for h in (pool.hosts[0], pool.hosts[19]):
            argv = ["ssh", "-i", h.key, "-p", str(h.port), "-o", f"UserKnownHostsFile={h.known_hosts}",
                    "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"{h.user}@{h.address}", "echo ok"]
            assert subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip() == "ok"
    finally:
        pool.stop()


@pytest.mark.slow
@pytest.mark.ssh
def test_quick_fleet_section_writes_the_fleet_keys(tmp_path, monkeypatch):
    """The fleet section on a small fleet (monkeypatched sizes: 3 and 4 hosts) fills the keys and details."""
    _need_sshd()
    from bench import fleet

    monkeypatch.setattr(fleet, "FLEET_SIZES", (3, 4))
    monkeypatch.setattr(fleet, "QUICK_FORKS", (1, 4))
    out = tmp_path / "results.json"
    argv = ["--quick", "--only", "fleet", "--out", str(out), "--no-docs", "--first-octet", "200"]
    assert main(argv) == 0
    res = json.loads(out.read_text())
    ours = res["details"]["fleet"]["ours"]
    assert set(ours) == {"1", "3", "4"} and set(res["details"]["fleet"]["forks"]) == {"1", "4"}
    assert all(ours[n]["control_cpu_s"] > 0 and ours[n]["host_cpu_s"] >= 0 for n in ours)
    # Kept (the default), a host's share can be below the kernel's 10 ms tick; each run its own connection, never.
    direct = res["details"]["fleet"]["direct"]["4"]
    assert direct["host_cpu_s"] > 0 and res["fleet_100_control_cpu_s_direct"] is None
    # the sizes were patched, so the 100-host keys stay empty, with a reason
    assert res["fleet_100_wall_s"] is None and "fleet_100_wall_s" in res["notes"]
    assert "fleet_peers" in res["notes"]


@pytest.mark.slow
@pytest.mark.ssh
def test_full_fleet_section_times_the_peers_when_installed(tmp_path, monkeypatch):
    """Outside --quick the fleet section times each peer once per size (pyinfra here, on 3 and 4 hosts)."""
    _need_sshd()
    if not (peers.VENVS / "pyinfra" / ".dfp-bench-installed").exists():
        pytest.skip("pyinfra not installed yet: `invoke bench --quick` installs it (needs PyPI)")
    from bench import fleet

    monkeypatch.setattr(fleet, "FLEET_SIZES", (3, 4))
    out = tmp_path / "results.json"
    argv = ["--only", "fleet", "--tools", "pyinfra", "--out", str(out), "--no-docs", "--first-octet", "205"]
    assert main(argv) == 0
    res = json.loads(out.read_text())
    assert set(res["details"]["fleet"]["peers"]["pyinfra"]) == {"3", "4"}, res["notes"]
    assert "fleet" not in res["notes"]


@pytest.mark.parametrize("n, address", [(2, "127.0.0.2"), (255, "127.0.0.255"), (256, "127.0.1.0"),
                                        (512 + 999, "127.0.5.231")])
def test_pool_addresses_go_past_one_octet_for_a_thousand_hosts(n, address):
    from tests.sshd_harness import loopback_address

    assert loopback_address(n) == address


def _twice(first: float, again: float, rc: int = 0, passed: int = 10, changed: int = 0) -> dict:
    run = {"rc": rc, "passed": passed, "failed": 0, "changed": changed, "runs": 1}
    return {"first": {**run, "changed": 3, "seconds": first}, "again": {**run, "seconds": again}}


def test_the_targets_figures_sum_the_second_runs_that_end_alike_and_change_nothing():
    """bench/targets.py: the no-change figure is the second runs both tools pass with nothing changed; a second
    run that changes tasks counts only in 'again', and one the tools end differently in neither."""
    from bench.targets import figures_of

    per_target = {
        "stat": {"ansible": _twice(7.0, 6.0), "ours": _twice(0.8, 0.6)},
        "command_shell": {"ansible": _twice(30.0, 30.0, changed=35), "ours": _twice(5.0, 5.0, changed=35)},
        "copy": {"ansible": _twice(700.0, 90.0, rc=2, passed=40), "ours": _twice(7.0, 1.0, rc=2, passed=42)},
    }
    figures = figures_of(per_target)
    assert figures["first"] == {"targets": ["stat", "command_shell", "copy"], "ansible": 737.0, "ours": 12.8,
                                "ratio": 0.017}
    assert figures["again"] == {"targets": ["stat", "command_shell"], "ansible": 36.0, "ours": 5.6, "ratio": 0.156}
    assert figures["no_change"] == {"targets": ["stat"], "ansible": 6.0, "ours": 0.6, "ratio": 0.1}
    figures["no_change_cold"] = {"targets": ["stat"], "ansible": 6.0, "ours": 1.2, "ratio": 0.2}
    keys = {"targets_no_change_ansible_ratio": figures["no_change"]["ratio"],
            "targets_no_change_cold_ansible_ratio": figures["no_change_cold"]["ratio"]}
    text = render_block(_result(details={"targets": {"per_target": per_target, **figures}}, **keys))
    assert "- no-change, no resident control node (DFP_RESIDENT=0): stat: ours 1.2 s, ansible-playbook 6.0 s" in text
    assert "| stat | 7.0 (3) | 0.8 (3) | 6.0 (0) | 0.6 (0) | 0, 10 / 0, 10 |" in text
    assert "- no-change: stat: ours 0.6 s, ansible-playbook 6.0 s, ours / ansible-playbook 0.100" in text
    assert "| ansible-core's targets, no-change second run: ours / ansible-playbook | 0.100 | <= 0.100 | met |" in text
