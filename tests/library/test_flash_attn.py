"""library/flash_attn.py: the decision table per GPU, wheel choice by file name, and the remove-and-repin
path run for real in environments holding locally built fake flash-attn / flash-attn-4 / vllm wheels."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from dflash_host.env.flash_attn import choose_flash_attn, choose_wheel, parse_compute_capability, plan_actions, wheel_problems  # noqa: E402
from dflash_host.module import Context, ModuleError, execute  # noqa: E402
from library import flash_attn  # noqa: E402
from tests.fakes.wheels import PY_TAG, fa2_sdist, fa2_wheel, fa4_wheel, simple_wheel, vllm_wheel  # noqa: E402
from tests.helpers import install_uv  # noqa: E402

pytestmark = pytest.mark.usefixtures("clean_pip_config")  # this machine's pip setup stays out

PY = sys.executable
FA2, FA4 = "flash-attn", "flash-attn-4"
TORCH = {"torch_version": "2.6.0+cu124", "cuda_version": "12.4", "cxx11_abi": False}


@pytest.fixture(scope="module")
def uv(tmp_path_factory):
    tool = tmp_path_factory.mktemp("tools")
    return {"path": install_uv(tool), "tool_dir": str(tool)}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    """A wheelhouse: fa2 for two torch builds and an older version, fa4, a fake vllm."""
    wh = tmp_path_factory.mktemp("fa-wheels")
    fa2_wheel(wh)  # 2.8.3+cu12torch2.6cxx11abiFALSE
    fa2_wheel(wh, local="cu12torch2.7cxx11abiTRUE")
    fa2_wheel(wh, version="2.7.4.post1")
    fa4_wheel(wh)
    vllm_wheel(wh)
    return wh


def make_env(tmp_path: Path, uv: dict, wheels: Path, *reqs: str, pip: bool = False) -> str:
    """A real venv holding the given distributions, installed in order (later ones overwrite shared files)."""
    env = tmp_path / "env"
    subprocess.run([uv["path"], "venv", "-q", "--python", PY, *(["--seed"] if pip else []), str(env)], check=True)
    python = str(env / "bin" / "python")
    for req in reqs:
        subprocess.run(
            [uv["path"], "pip", "install", "-q", "--python", python, "--no-index", "--find-links", str(wheels), req], check=True
        )
    return python


def call(args: dict, check: bool = False) -> dict:
    res = execute(flash_attn.ARGS, flash_attn.run, args, Context(check=check, diff=True), "flash_attn")
    json.dumps(res)
    return res


def dists(python: str) -> dict:
    code = (
        "import importlib.metadata as md, json; print(json.dumps({d.metadata['Name']: d.version for d in "
        "md.distributions() if d.metadata['Name'].startswith(('flash', 'vllm'))}))"
    )
    return json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout)


def runs(python: str, code: str) -> bool:
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


def imports(python: str, mod: str) -> bool:
    return runs(python, f"import {mod}")


# ---------------------------------------------------------------------------------------------------
# The decision table


@pytest.mark.parametrize(
    "cc, need, line, requirement, forbidden, error",
    [
        (None, False, None, None, [FA2, FA4], None),
        (None, True, None, None, [FA2, FA4], "no GPU"),
        ("7.5", False, None, None, [FA2, FA4], None),
        ("7.5", True, None, None, [FA2, FA4], "SM 7.5"),
        ("8.0", False, None, None, [FA4], None),
        ("8.0", True, "fa2", "flash-attn<3", [FA4], None),
        ("8.6", False, None, None, [FA4], None),
        ("8.6", True, "fa2", "flash-attn<3", [FA4], None),
        ("8.9", False, None, None, [FA4], None),
        ("8.9", True, "fa2", "flash-attn<3", [FA4], None),
        ("9.0", False, None, None, [FA4], None),
        ("9.0", True, "fa2", "flash-attn<3", [FA4], None),
        ("10.0", False, None, None, [], None),
        ("10.0", True, "fa4", "flash-attn-4", [], None),
        ("12.0", False, None, None, [], None),
        ("12.0", True, "fa4", "flash-attn-4", [], None),
    ],
)
def test_decision_table_per_gpu(cc, need, line, requirement, forbidden, error):
    d = choose_flash_attn(cc, "2.6.0+cu124", "12.4", need)
    assert (d["line"], d["requirement"], d["forbidden"]) == (line, requirement, forbidden)
    assert d["reason"]
    if error:
        assert error in d["error"] and "flash_attn_needed" in d["error"]
    else:
        assert d["error"] is None


def test_reasons_say_why():
    assert "vllm_flash_attn" in choose_flash_attn("9.0", "2.6.0", "12.4", False)["reason"]
    assert "without flash_attn.ops" in choose_flash_attn("8.0", "2.6.0", "12.4", True)["reason"]
    assert "Blackwell" in choose_flash_attn("10.0", "2.8.0", "12.8", True)["reason"]


@pytest.mark.parametrize(
    "torch_v, cuda_v, words",
    [(None, None, ["torch is not installed"]), ("2.13.0+cpu", None, ["CPU build", "vllm_flavor cuda"])],
)
def test_need_without_a_cuda_torch_is_an_error(torch_v, cuda_v, words):
    d = choose_flash_attn("9.0", torch_v, cuda_v, True)
    for word in words:
        assert word in d["error"]


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, None),
        ("", None),
        ("None", None),
        ([], None),
        ("9.0", (9, 0)),
        (8.6, (8, 6)),
        ("12.0", (12, 0)),
        ("sm_90", (9, 0)),
        ("sm100", (10, 0)),
        (["9.0", "8.0"], (8, 0)),
        ([{"x": 1}] and ["10.0"], (10, 0)),
    ],
)
def test_compute_capability_forms(value, expected):
    assert parse_compute_capability(value) == expected


def test_compute_capability_garbage_is_a_clear_error():
    with pytest.raises(ModuleError) as err:
        parse_compute_capability("hopper")
    assert "'hopper'" in err.value.msg and "facts.gpus" in err.value.msg


# ---------------------------------------------------------------------------------------------------
# Wheel choice by file name


ENV = {"torch_version": "2.6.0+cu124", "cuda_version": "12.4", "python_tag": "cp311", "machine": "x86_64", "cxx11_abi": False}


@pytest.mark.parametrize(
    "name, env, words",
    [
        ("flash_attn-2.8.3+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl", ENV, []),
        ("flash_attn-2.8.3+cu12torch2.6cxx11abiTRUE-cp311-cp311-linux_x86_64.whl", ENV, ["cxx11abi TRUE"]),
        ("flash_attn-2.8.3+cu12torch2.7cxx11abiFALSE-cp311-cp311-linux_x86_64.whl", ENV, ["torch 2.7"]),
        ("flash_attn-2.8.3+cu12torch2.6cxx11abiFALSE-cp312-cp312-linux_x86_64.whl", ENV, ["cp312"]),
        ("flash_attn-2.8.3+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_aarch64.whl", ENV, ["aarch64"]),
        ("flash_attn-2.5.8+cu118torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl", ENV, ["CUDA 11"]),
        ("flash_attn-2.8.3+cu12torch2.6cxx11abiTRUE-cp311-cp311-linux_x86_64.whl", dict(ENV, cxx11_abi=None), []),
        ("flash_attn-3.0.0+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl", ENV, ["not 2.x"]),
        ("flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl", ENV, ["no +cuXXtorch"]),
        ("flash_attn_4-4.0.0b36-py3-none-any.whl", ENV, ["not flash-attn"]),
    ],
)
def test_fa2_wheel_fit_by_torch_cuda_python_abi_and_platform(name, env, words):
    problems = wheel_problems(name, "fa2", env)
    assert bool(problems) == bool(words), problems
    for word in words:
        assert word in " ".join(problems)


def test_choose_wheel_takes_the_newest_fitting_one_and_says_why_others_do_not_fit():
    names = [
        "flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl",
        "flash_attn-2.8.3+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl",
        "flash_attn-2.8.3+cu12torch2.7cxx11abiTRUE-cp311-cp311-linux_x86_64.whl",
        "flash_attn_4-4.0.0b36-py3-none-any.whl",
        "README.txt",
    ]
    best, rejected = choose_wheel(names, "fa2", ENV)
    assert best == names[1]
    assert list(rejected) == [names[2]]
    assert choose_wheel(names, "fa4", ENV)[0] == names[3]
    assert choose_wheel(names[2:3], "fa2", ENV)[0] is None


@pytest.mark.parametrize(
    "line, installed, has_ops, orphan, expected",
    [
        (None, {}, False, False, {"remove": [], "remove_orphan": False, "install": False, "reinstall": False}),
        (None, {FA4: "4.0"}, False, False, {"remove": [FA4], "remove_orphan": False, "install": False, "reinstall": False}),
        (None, {}, False, True, {"remove": [], "remove_orphan": True, "install": False, "reinstall": False}),
        ("fa2", {}, False, False, {"remove": [], "remove_orphan": False, "install": True, "reinstall": False}),
        ("fa2", {FA2: "2.8.3"}, True, False, {"remove": [], "remove_orphan": False, "install": False, "reinstall": False}),
        (
            "fa2",
            {FA2: "2.8.3", FA4: "4.0"},
            True,
            False,
            {"remove": [FA4], "remove_orphan": False, "install": False, "reinstall": True},
        ),
        ("fa2", {FA2: "2.8.3"}, False, False, {"remove": [], "remove_orphan": False, "install": False, "reinstall": True}),
        ("fa4", {FA4: "4.0"}, False, False, {"remove": [], "remove_orphan": False, "install": False, "reinstall": False}),
        ("fa4", {}, False, False, {"remove": [], "remove_orphan": False, "install": True, "reinstall": False}),
    ],
)
def test_plan_actions(line, installed, has_ops, orphan, expected):
    forbidden = {None: [FA4], "fa2": [FA4], "fa4": []}[line]
    decision = {"line": line, "forbidden": forbidden}
    assert plan_actions(decision, installed, has_ops, orphan) == expected


# ---------------------------------------------------------------------------------------------------
# Real environments


def test_fa4_on_ampere_is_removed_so_vllm_imports_again(tmp_path, uv, wheels):
    python = make_env(tmp_path, uv, wheels, "vllm", "flash-attn-4")
    assert not imports(python, "vllm")  # the fake reproduces: No module named 'flash_attn.ops'
    res = call({"python": python, "compute_capability": "8.0", "tool_dir": uv["tool_dir"]})
    assert res["changed"] and not res["failed"], res["msg"]
    assert res["removed"] == [FA4] and res["line"] is None and res["imports"]["vllm"]["ok"]
    assert dists(python) == {"vllm": "0.26.0"} and imports(python, "vllm")
    assert res["diff"]["before"]["flash_attn_dists"] == {FA4: "4.0.0b36"}

    again = call({"python": python, "compute_capability": "8.0", "tool_dir": uv["tool_dir"]})
    assert again["changed"] is False and "verified before" in again["msg"]


def test_co_installed_fa2_and_fa4_on_hopper_need_removes_fa4_and_repins_fa2(tmp_path, uv, wheels):
    fa2_file = next(wheels.glob("flash_attn-2.8.3+cu12torch2.6*.whl"))
    python = make_env(tmp_path, uv, wheels, "vllm", str(fa2_file), "flash-attn-4")
    assert not runs(python, "from flash_attn import flash_attn_func")  # fa4's __init__ replaced fa2's
    args = dict(TORCH, python=python, compute_capability=["9.0"], need=True, wheel=str(wheels), tool_dir=uv["tool_dir"])
    res = call(args)
    assert res["changed"] and not res["failed"], res["msg"]
    assert res["removed"] == [FA4] and res["installed"].endswith("(reinstalled)")
    assert res["requirement"] == "flash-attn<3" and res["line"] == "fa2"
    assert all(r["ok"] for r in res["imports"].values()) and "flash_attn.ops.triton.rotary" in res["imports"]
    assert dists(python) == {"vllm": "0.26.0", "flash-attn": "2.8.3+cu12torch2.6cxx11abiFALSE"}
    assert imports(python, "flash_attn.ops.triton.rotary") and runs(python, "from flash_attn import flash_attn_func")

    again = call(args)
    assert again["changed"] is False, again["msg"]


@pytest.mark.slow
def test_need_on_ampere_installs_the_wheel_that_fits_from_a_folder_with_pip(tmp_path, uv, wheels):
    python = make_env(tmp_path, uv, wheels, "vllm", pip=True)
    args = dict(
        TORCH,
        python=python,
        compute_capability="8.6",
        need=True,
        wheel=str(wheels),
        installer="pip",
        cxx11_abi=True,
        torch_version="2.7.1+cu126",
        cuda_version="12.6",
    )
    res = call(args)
    assert res["changed"] and not res["failed"], res["msg"]
    assert res["installed"] == f"flash_attn-2.8.3+cu12torch2.7cxx11abiTRUE-{PY_TAG}-{PY_TAG}-linux_x86_64.whl"
    assert dists(python)["flash-attn"] == "2.8.3+cu12torch2.7cxx11abiTRUE"
    assert call(args)["changed"] is False


def test_no_fitting_wheel_is_a_clear_error_and_changes_nothing(tmp_path, uv, wheels):
    python = make_env(tmp_path, uv, wheels, "vllm")
    res = call(
        dict(
            TORCH,
            python=python,
            compute_capability="9.0",
            need=True,
            wheel=str(wheels),
            torch_version="2.5.1+cu121",
            cuda_version="12.1",
            tool_dir=uv["tool_dir"],
        )
    )
    assert res["failed"] and "no wheel in" in res["msg"] and "torch 2.5.1+cu121" in res["msg"]
    assert "built for torch 2.6" in res["msg"] and "flash_attn_allow_build" in res["msg"]
    assert dists(python) == {"vllm": "0.26.0"}


def test_a_source_package_is_refused_unless_building_is_allowed(tmp_path, uv, wheels):
    python = make_env(tmp_path, uv, wheels, "vllm")
    sdists = tmp_path / "sdists"
    fa2_sdist(sdists)
    res = call(dict(TORCH, python=python, compute_capability="8.0", need=True, wheelhouse=str(sdists), tool_dir=uv["tool_dir"]))
    assert res["failed"] and "source package" in res["msg"] and "flash_attn_wheel" in res["msg"], res["msg"]
    assert "flash_attn_allow_build true" in res["msg"]
    assert dists(python) == {"vllm": "0.26.0"}


def test_a_fa2_wheel_without_the_rotary_module_fails_verification(tmp_path, uv, wheels):
    bad = tmp_path / "bad"
    fa2_wheel(bad, with_rotary=False)
    python = make_env(tmp_path, uv, wheels)
    res = call(dict(TORCH, python=python, compute_capability="8.0", need=True, wheel=str(bad), tool_dir=uv["tool_dir"]))
    assert res["failed"] and "import flash_attn.ops.triton.rotary" in res["msg"], res["msg"]


def test_blackwell_need_installs_flash_attn_4(tmp_path, uv, wheels):
    python = make_env(tmp_path, uv, wheels)  # no fake vllm: it models the Ampere failure only
    res = call(dict(TORCH, python=python, compute_capability="10.0", need=True, wheelhouse=str(wheels), tool_dir=uv["tool_dir"]))
    assert res["changed"] and not res["failed"], res["msg"]
    assert res["line"] == "fa4" and dists(python)[FA4] == "4.0.0b36" and res["imports"]["flash_attn.cute"]["ok"]


def test_no_gpu_removes_every_flash_attn_line(tmp_path, uv, wheels):
    fa2_file = next(wheels.glob("flash_attn-2.8.3+cu12torch2.6*.whl"))
    python = make_env(tmp_path, uv, wheels, str(fa2_file))
    res = call({"python": python, "compute_capability": [], "tool_dir": uv["tool_dir"]})
    assert res["changed"] and res["removed"] == [FA2] and dists(python) == {}, res["msg"]
    need = call({"python": python, "compute_capability": None, "need": True, "tool_dir": uv["tool_dir"]})
    assert need["failed"] and "no GPU" in need["msg"] and "flash_attn_needed false" in need["msg"]


def test_an_allowed_fa2_that_does_not_import_is_removed(tmp_path, uv, wheels):
    broken = tmp_path / "broken"
    fa2_wheel(broken, local="", version="2.6.3")  # imports flash_attn_2_cuda ...
    python = make_env(tmp_path, uv, broken, "flash-attn")
    site = next(Path(python).parent.parent.glob("lib/python*/site-packages"))
    (site / "flash_attn_2_cuda.py").unlink()  # ... which is now missing, like an ABI mismatch
    res = call({"python": python, "compute_capability": "9.0", "tool_dir": uv["tool_dir"]})
    assert res["changed"] and res["removed"] == [FA2] and dists(python) == {}, res["msg"]


def test_check_mode_reports_and_changes_nothing(tmp_path, uv, wheels):
    python = make_env(tmp_path, uv, wheels, "vllm", "flash-attn-4")
    res = call({"python": python, "compute_capability": "8.9", "tool_dir": uv["tool_dir"]}, check=True)
    assert res["changed"] and "would remove flash-attn-4" in res["msg"]
    assert dists(python) == {"vllm": "0.26.0", FA4: "4.0.0b36"}
    missing = call({"python": str(tmp_path / "nope" / "bin" / "python"), "compute_capability": "9.0"}, check=True)
    assert not missing["failed"] and "does not exist yet" in missing["msg"]


def test_a_missing_environment_is_a_clear_error(tmp_path):
    res = call({"python": str(tmp_path / "venv" / "current" / "bin" / "python"), "compute_capability": "9.0"})
    assert res["failed"] and "run the venv role first" in res["msg"]


def test_orphaned_flash_attn_folder_without_ops_is_removed(tmp_path, uv, wheels):
    python = make_env(tmp_path, uv, wheels, "vllm")
    site = next(Path(python).parent.parent.glob("lib/python*/site-packages"))
    (site / "flash_attn" / "cute").mkdir(parents=True)  # left behind by a broken uninstall
    (site / "flash_attn" / "cute" / "__init__.py").write_text("")
    assert not imports(python, "vllm")
    res = call({"python": python, "compute_capability": "8.0", "tool_dir": uv["tool_dir"]})
    assert res["changed"] and not (site / "flash_attn").exists() and imports(python, "vllm"), res["msg"]


def test_runs_by_hand(tmp_path, uv, wheels):
    python = make_env(tmp_path, uv, wheels, simple_wheel(tmp_path / "w", "dfp-a", "1.0").as_posix())
    (tmp_path / "args.json").write_text(json.dumps({"python": python, "compute_capability": "9.0"}))
    out = subprocess.run([PY, "-m", "library.flash_attn", str(tmp_path / "args.json")], cwd=ROOT, capture_output=True, text=True)
    res = json.loads(out.stdout)
    assert out.returncode == 0 and res["line"] is None and res["changed"] is False, res["msg"]
