"""`invoke monitoring --out DIR -e monitoring_install=true` through the engine on a local host (no systemd here:
the role's daemon path): Debian's node_exporter and Prometheus really run and answer on unused ports, node_exporter
serves the tool's textfile (a speed record written by the speed_record module) and the monitor agent's (kept running
from its own runtime copy, GPU memory from the stand-in nvidia-smi), Prometheus scrapes them and loads the
written rules; a second run changes nothing; a changed rule file reloads the same Prometheus; monitoring_state
absent stops all three (only what the test started: their pidfiles). On a real sshd host, as its plain login user,
node_exporter and the agent run from the runtime the engine shipped."""

from __future__ import annotations

import json
import re
import shutil
import time
import urllib.request

import pytest
from invoke import Exit

from dfp_cli.monitoring.command import monitoring
from tests.helpers import play
from tests.monitoring.test_command import OPTS, write_launch, write_record
from tests.sshd_harness import free_port

BINARIES = ("/usr/bin/prometheus", "/usr/bin/prometheus-node-exporter")
needs_packages = pytest.mark.skipif(
    not all(shutil.which(b) for b in BINARIES) and not __import__("os").environ.get("CI"),
    reason="no prometheus / prometheus-node-exporter here (Debian packages; .ci/run installs them)")
DEADLINE_S = 90.0


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback, http
            return resp.status, resp.read().decode()
    except OSError as exc:
        return 0, str(exc)


def eventually(what: str, probe) -> object:
    """probe() until it returns something true, within DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {DEADLINE_S:g} s")


def recap_changed(said: str) -> int:
    """changed= of the `local` recap line the install printed."""
    found = re.findall(r"^local\s*:.*?changed=(\d+)", said, re.M)
    assert found, said
    return int(found[-1])


@pytest.fixture
def fleet(tmp_path, inventory_file, gpu):
    """A local host with a speed record, unused ports, its own dfp_root; the daemons stopped after."""
    root = tmp_path / "host"
    root.mkdir()
    write_record(root)
    write_launch(root)
    ports = {"node_exporter_port": free_port(['127.0.0.1']), "prometheus_port": free_port(['127.0.0.1'])}
    host_vars = {"dfp_root": str(root), "vllm_port": free_port(['127.0.0.1']), "served_model_name": "tiny-target",
                 "node_exporter_listen_host": "127.0.0.1", "prometheus_listen_host": "127.0.0.1",
                 "monitoring_scrape_interval": "1s", "nvidia_smi": gpu.nvidia_smi, **ports}
    inv = inventory_file(local=True, groups={"gpu": ["local"]}, host_vars={"local": host_vars})
    yield inv, root, ports
    gone = play("monitoring-install", inv, extra_vars={"monitoring_state": "absent", "monitoring_watched": ["local"],
                                                       "monitoring_config_src": str(tmp_path)})
    assert gone.exit_code == 0, gone.results[-1].msg


def pid_of(root, name: str) -> int:
    return json.loads((root / "run" / f"{name}.pid").read_text())["pid"]


@needs_packages
def test_install_runs_both_then_changes_nothing_then_reloads_on_new_rules(tmp_path, fleet, capsys):
    inv, root, ports = fleet
    out = tmp_path / "prom"
    opts = {**OPTS, "inventory": [str(inv)], "out": str(out), "extra_vars": ["monitoring_install=true"]}
    monitoring(None, **opts)
    assert recap_changed(capsys.readouterr().out) > 0
    prom, node = f"http://127.0.0.1:{ports['prometheus_port']}", f"http://127.0.0.1:{ports['node_exporter_port']}"
    assert get(f"{prom}/-/ready")[0] == 200
    status, metrics = get(f"{node}/metrics")
    assert status == 200 and 'dflash_speedup{concurrency="16"' in metrics, metrics[-2000:]
    eventually("node_exporter serves the monitor agent's textfile (GPU memory from the stand-in nvidia-smi)",
               lambda: "dflash_gpu_memory_used_mib{" in get(f"{node}/metrics")[1])
    assert (root / "monitor" / json.loads((root / "run" / "dflash-monitor.daemon.json").read_text())["environment"]
            ["PYTHONPATH"].rpartition("/")[2] / "dflash_host" / "monitor" / "__main__.py").is_file()
    query = f"{prom}/api/v1/query?query=dflash_speedup"
    eventually("Prometheus scrapes the textfile through node_exporter",
               lambda: '"job":"node"' in get(query)[1] and '"host":"local"' in get(query)[1])
    pids = pid_of(root, "prometheus"), pid_of(root, "node-exporter"), pid_of(root, "dflash-monitor")

    monitoring(None, **opts)
    assert recap_changed(capsys.readouterr().out) == 0
    assert (pid_of(root, "prometheus"), pid_of(root, "node-exporter"), pid_of(root, "dflash-monitor")) == pids

    inv.write_text(inv.read_text().replace("served_model_name: tiny-target",
                                           "served_model_name: tiny-target\n      min_acceptance_rate: 0.45"))
    monitoring(None, **opts)
    assert recap_changed(capsys.readouterr().out) > 0
    assert pid_of(root, "prometheus") == pids[0]  # reloaded (SIGHUP), not restarted
    eventually("Prometheus loads the changed rule file",
               lambda: "vector(0.45)" in get(f"{prom}/api/v1/rules")[1])


@needs_packages
def test_absent_stops_all_three_and_a_second_absent_is_ok(tmp_path, fleet, capsys):
    """The undo docs/MONITORING.md gives: the same command with -e monitoring_state=absent."""
    inv, root, ports = fleet
    extra = {"monitoring_watched": ["local"], "monitoring_config_src": str(tmp_path / "prom")}
    (tmp_path / "prom").mkdir()
    (tmp_path / "prom" / "prometheus.yml").write_text("global: {scrape_interval: 1s}\n")
    assert play("monitoring-install", inv, extra_vars=extra).exit_code == 0
    assert get(f"http://127.0.0.1:{ports['node_exporter_port']}/metrics")[0] == 200
    monitoring(None, **{**OPTS, "inventory": [str(inv)], "out": str(tmp_path / "prom"),
                        "extra_vars": ["monitoring_install=true", "monitoring_state=absent"]})
    assert recap_changed(capsys.readouterr().out) == 3  # node_exporter, the agent, Prometheus
    assert not list((root / "run").glob("*.pid"))
    assert get(f"http://127.0.0.1:{ports['node_exporter_port']}/metrics")[0] == 0
    assert get(f"http://127.0.0.1:{ports['prometheus_port']}/-/ready")[0] == 0
    again = play("monitoring-install", inv, extra_vars={**extra, "monitoring_state": "absent"})
    assert again.exit_code == 0 and again.total("changed") == 0, again.recap


@needs_packages
def test_on_a_remote_host_as_a_plain_user_the_exporter_and_the_agent_run(remote_host, gpu):
    """A real sshd host, its login user not root: node_exporter and the agent (from its runtime copy, the one the
    engine shipped) run under its dfp_root; Prometheus goes elsewhere (monitoring_host names another host)."""
    port = free_port(["127.0.0.1"])
    extra = {"monitoring_watched": [remote_host.name], "monitoring_host": "elsewhere", "node_exporter_port": port,
             "node_exporter_listen_host": "127.0.0.1", "nvidia_smi": gpu.nvidia_smi}
    try:
        first = play("monitoring-install", remote_host.inventory, extra_vars=extra)
        assert first.exit_code == 0 and first.total("changed") > 0, first.results[-1].msg
        eventually("node_exporter on the remote host serves the agent's GPU memory",
                   lambda: "dflash_gpu_memory_used_mib{" in get(f"http://127.0.0.1:{port}/metrics")[1])
        again = play("monitoring-install", remote_host.inventory, extra_vars=extra)
        assert again.exit_code == 0 and again.total("changed") == 0, again.recap
    finally:
        gone = play("monitoring-install", remote_host.inventory, extra_vars={**extra, "monitoring_state": "absent"})
    assert gone.exit_code == 0 and gone.total("changed") == 2, gone.recap
    assert get(f"http://127.0.0.1:{port}/metrics")[0] == 0


def test_a_monitoring_host_the_inventory_lacks_is_one_paragraph_after_the_files(tmp_path, fleet, capsys):
    inv, root, ports = fleet
    out = tmp_path / "prom"
    with pytest.raises(Exit) as exc:
        monitoring(None, **{**OPTS, "inventory": [str(inv)], "out": str(out),
                            "extra_vars": ["monitoring_install=true", "monitoring_host=mon9"]})
    err = capsys.readouterr().err
    assert exc.value.code == 4 and "(monitoring_host is 'mon9': name an inventory host" in err, err
    assert "Traceback" not in err and (out / "prometheus.yml").is_file() and not (root / "run" / "prometheus.pid").exists()
