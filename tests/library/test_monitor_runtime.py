"""library/monitor_runtime.py: a lasting copy of dflash_host the agent runs from (a second run is ok), older copies
it made removed (its marker), a folder it did not make left alone; the agent starts from the copy alone."""

from __future__ import annotations

import subprocess

import pytest
from _helpers import load_module, run_module

from dflash_host.module import ModuleError

monitor_runtime = load_module("monitor_runtime")


def test_copies_once_prunes_only_its_own_and_the_copy_runs_the_agent(tmp_path):
    root = tmp_path / "root"
    old, foreign = root / "monitor" / "runtime-old", root / "monitor" / "runtime-foreign"
    old.mkdir(parents=True)
    (old / monitor_runtime.MARKER).write_text("")
    foreign.mkdir()
    first = run_module(monitor_runtime, {"root": str(root)})
    assert first["changed"] and first["removed"] == [str(old)] and foreign.is_dir() and not old.exists()
    assert (tmp_path / "root" / "monitor").joinpath(first["runtime"].rpartition("/")[2], "dflash_host").is_dir()
    again = run_module(monitor_runtime, {"root": str(root)})
    assert not again["changed"] and again["runtime"] == first["runtime"] and again["argv"] == first["argv"]
    assert first["argv"][first["argv"].index("--textfile-dir") + 1] == str(root / "metrics")
    helped = subprocess.run([*first["argv"][:3], "--help"], env={**first["environment"], "PATH": "/usr/bin:/bin"},
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "--textfile-dir" in helped.stdout, helped.stderr


def test_the_unit_quotes_every_word_and_refuses_a_value_of_two_lines(tmp_path):
    """The unit a systemd host gets: ExecStart's words quoted with specifiers escaped (as the vLLM server's unit),
    PYTHONPATH one quoted setting; a value with a newline would add a line to the unit, and is refused."""
    root = tmp_path / "root"
    unit = run_module(monitor_runtime, {"root": str(root), "nvidia_smi": "/opt/50%/nvidia-smi"})["unit"]
    [exec_start] = [ln for ln in unit.splitlines() if ln.startswith("ExecStart=")]
    assert '"--nvidia-smi" "/opt/50%%/nvidia-smi"' in exec_start and '"-m" "dflash_host.monitor"' in exec_start
    assert f'Environment="PYTHONPATH={root}/monitor/runtime-' in unit
    with pytest.raises(ModuleError, match="ExecStart contains a newline"):
        run_module(monitor_runtime, {"root": str(root), "nvidia_smi": "/usr/bin/nvidia-smi\nExecStartPre=/x"})
