"""Input files cannot exhaust the control node: size, alias expansion and nesting are bounded.

Each case runs the real CLI in a child process with a 1 GiB address-space limit and asserts a clear
refusal (exit 4, one paragraph naming the file and the limit) within a few seconds. Before the bounds,
the billion-laughs inventory died with MemoryError, a million nested '[' crashed libyaml (SIGSEGV),
10,000 nested '[' gave a RecursionError, and /dev/zero as an inventory was read until memory ran out.
A playbook's whole load is bounded too, all its files together: before that, twelve task files each
under the per-file bounds loaded to 1.6 GB (MemoryError here), and bytes or values adding up across
files, or one file imported thousands of times, loaded and ran.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MEMORY_LIMIT = 1 << 30
LOCAL_HOSTS = "  hosts:\n    local: {ansible_connection: local}\n"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def invoke_bounded(*args: str, seconds: float = 10) -> tuple[int, str]:
    """The CLI under a memory limit; it must answer within `seconds` (a generous bound on a shared machine)."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True, timeout=120, preexec_fn=_limit_memory
    )
    elapsed = time.monotonic() - started
    out = proc.stdout + proc.stderr
    assert elapsed < seconds, f"took {elapsed:.1f} s:\n{out[-2000:]}"
    return proc.returncode, out


def _refused(code: int, out: str, *needles: str) -> None:
    assert code == 4, out[-3000:]
    assert "Traceback" not in out and "MemoryError" not in out, out[-3000:]
    assert len(out.strip().splitlines()) == 1, f"one paragraph expected:\n{out[-3000:]}"
    for needle in needles:
        assert needle in out, f"{needle!r} not in:\n{out[-3000:]}"


def _laughs(levels: int, fanout: int, merge: bool = False, indent: str = "    ") -> str:
    """Variables where each level refers `fanout` times to the one below (lists, or mappings merged with <<)."""
    lines = ['lol0: &lol0 {k: "lol"}' if merge else 'lol0: &lol0 "lol"']
    for i in range(1, levels + 1):
        refs = ", ".join([f"*lol{i - 1}"] * fanout)
        lines.append(f"lol{i}: &lol{i} {{<<: [{refs}], own{i}: x}}" if merge else f"lol{i}: &lol{i} [{refs}]")
    return "".join(f"{indent}{line}\n" for line in lines)


def _playbook(tmp_path: Path, body: str = "") -> tuple[Path, Path]:
    marker = tmp_path / "marker"
    pb = tmp_path / "pb.yaml"
    pb.write_text(
        f"- hosts: all\n  gather_facts: false\n  tasks:\n    - name: Would change the host\n"
        f"      file: {{path: {marker}, state: directory}}\n{body}"
    )
    return pb, marker


@pytest.mark.parametrize("merge", [False, True], ids=["aliases", "merge-keys"])
def test_billion_laughs_inventory_is_refused_quickly(tmp_path, merge):
    inv = tmp_path / "bomb.yaml"
    inv.write_text("all:\n" + LOCAL_HOSTS + "  vars:\n" + _laughs(9, 9, merge))  # 9**9 = 387 million values once expanded
    code, out = invoke_bounded("inventory", "--list", "-i", str(inv))
    _refused(code, out, "bomb.yaml", "aliases (*name) expand too far", "1,000,000")
    # Aliases are fine below the budget: 4**8 = 65,536 values.
    inv.write_text("all:\n" + LOCAL_HOSTS + "  vars:\n" + _laughs(8, 4, merge))
    code, out = invoke_bounded("inventory", "--list", "-i", str(inv))
    assert code == 0, out[-2000:]


def test_secret_variable_holding_a_bomb_is_refused_before_the_run(tmp_path):
    """Naming a secret makes the engine walk its value (to mask it): a bomb there used to take 2 GB."""
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yaml").write_text(_laughs(9, 9, indent="") + "hf_token: *lol9\n")
    inv = tmp_path / "inv.yaml"
    inv.write_text("all:\n" + LOCAL_HOSTS)
    pb, marker = _playbook(tmp_path, '    - debug: {msg: "{{ hf_token | length }}"}\n')
    code, out = invoke_bounded("play", str(pb), "-i", str(inv))
    _refused(code, out, "group_vars/all.yaml", "expand too far")
    assert not marker.exists()


def test_oversized_playbook_is_refused_unread(tmp_path):
    pb, marker = _playbook(tmp_path)
    with pb.open("a") as fh:  # a valid playbook: 9 MiB of comment after it
        fh.write(("# " + "x" * 1022 + "\n") * 9 * 1024)
    inv = tmp_path / "inv.yaml"
    inv.write_text("all:\n" + LOCAL_HOSTS)
    code, out = invoke_bounded("play", str(pb), "-i", str(inv))
    _refused(code, out, "pb.yaml", "larger than 8 MiB", "MAX_YAML_BYTES")
    assert not marker.exists()


def test_endless_file_as_inventory_is_refused(tmp_path):
    code, out = invoke_bounded("inventory", "--list", "-i", "/dev/zero")
    _refused(code, out, "/dev/zero", "larger than 8 MiB")


@pytest.mark.parametrize(
    "value",
    [
        "[" * 10_000 + "]" * 10_000,  # was a RecursionError in the engine
        "[" * 1_000_000,  # crashed libyaml's composer (SIGSEGV), before the syntax error was even seen
        "\n" + "      " + "- " * 3000 + "deep",  # block style
        "&loop [*loop]",  # an alias inside the list it names
    ],
    ids=["flow-10k", "flow-1M", "block-3k", "self-alias"],
)
def test_deep_nesting_is_a_clear_error(tmp_path, value):
    inv = tmp_path / "deep.yaml"
    inv.write_text("all:\n" + LOCAL_HOSTS + "  vars:\n    x: " + value + "\n")
    code, out = invoke_bounded("inventory", "--list", "-i", str(inv))
    _refused(code, out, "deep.yaml", "more than 100 levels deep", "MAX_YAML_DEPTH")


def test_deep_extra_var_json_is_a_clear_error(tmp_path):
    pb, marker = _playbook(tmp_path)
    inv = tmp_path / "inv.yaml"
    inv.write_text("all:\n" + LOCAL_HOSTS)
    code, out = invoke_bounded("play", str(pb), "-i", str(inv), "-e", "x=" + "[" * 100_000 + "]" * 100)
    _refused(code, out, "-e number 1 (x)", "too deep")
    code, out = invoke_bounded("play", str(pb), "-i", str(inv), "-e", "x=" + "[" * 500 + "]" * 500)
    _refused(code, out, "-e number 1 (x)", "more than 100 levels deep")
    assert not marker.exists()


def test_file_that_is_not_utf8_is_a_clear_error(tmp_path):
    inv = tmp_path / "latin1.yaml"
    inv.write_bytes("all:\n  vars:\n    city: Zürich\n".encode("latin-1") + LOCAL_HOSTS.encode())
    code, out = invoke_bounded("inventory", "--list", "-i", str(inv))
    _refused(code, out, "latin1.yaml", "not UTF-8")


def _importing(tmp_path: Path, files: list[str], key: str = "import_tasks") -> tuple[Path, Path, Path]:
    """A playbook whose first task would change the host, then `key` of each of `files`; and its inventory."""
    pb, marker = _playbook(tmp_path, "".join(f"    - {key}: {name}\n" for name in files))
    inv = tmp_path / "inv.yaml"
    inv.write_text("all:\n" + LOCAL_HOSTS)
    return pb, inv, marker


def test_many_task_files_each_under_the_bounds_are_refused_by_the_whole_loads_task_budget(tmp_path):
    """Twelve 4 MiB task files (43,000 tasks each, every file under the size and values bounds) loaded to 1.6 GB in
    48 s: the whole load now stops at its 20,001st task, in the first file (the playbook holds two)."""
    task = "- name: install the package number one\n  command: echo hello world this is a longer line of text\n"
    for i in range(12):
        (tmp_path / f"t{i}.yaml").write_text(task * (4 * 2**20 // len(task) - 10))
    pb, inv, marker = _importing(tmp_path, [f"t{i}.yaml" for i in range(12)])
    code, out = invoke_bounded("play", str(pb), "-i", str(inv), seconds=30)
    _refused(code, out, "t0.yaml: task 19999", "more than 20,000 tasks in all", "MAX_LOAD_TASKS", str(pb))
    assert not marker.exists()


def test_task_files_of_long_text_are_refused_by_the_whole_loads_byte_budget(tmp_path):
    """Twelve 4 MiB task files of one task each: 48 MiB of YAML in all, refused unread at the file past 16 MiB."""
    for i in range(12):
        (tmp_path / f"t{i}.yaml").write_text(f"- debug: {{msg: {'x' * (4 * 2**20 - 100)}}}\n  when: false\n")
    pb, inv, marker = _importing(tmp_path, [f"t{i}.yaml" for i in range(12)], "include_tasks")
    code, out = invoke_bounded("play", str(pb), "-i", str(inv), seconds=30)
    _refused(code, out, "t3.yaml", "more than 16 MiB of YAML in all", "MAX_LOAD_BYTES", "split the work")
    assert not marker.exists()


def test_role_defaults_adding_up_past_the_whole_loads_values_budget_are_refused(tmp_path):
    """Three roles whose defaults hold 701,000 values each once their aliases are expanded (as rendering them
    would build them; every file under the per-file bound of 1,000,000)."""
    for i in range(3):
        role = tmp_path / "roles" / f"r{i}"
        role.mkdir(parents=True)
        (role / "defaults.yaml").write_text(f"base{i}: &b [{', '.join(['1'] * 1000)}]\nbig{i}: [{', '.join(['*b'] * 700)}]\n")
        (role / "tasks.yaml").write_text("- debug: {msg: hi}\n")
    pb, marker = _playbook(tmp_path)
    pb.write_text(pb.read_text().replace("  tasks:\n", "  roles: [r0, r1, r2]\n  tasks:\n"))
    inv = tmp_path / "inv.yaml"
    inv.write_text("all:\n" + LOCAL_HOSTS)
    code, out = invoke_bounded("play", str(pb), "-i", str(inv), seconds=30)
    _refused(code, out, "roles/r2/defaults.yaml", "more than 2,000,000 values in all", "MAX_LOAD_VALUES")
    assert not marker.exists()


def test_one_file_imported_again_and_again_counts_each_time(tmp_path):
    """Each import builds the file's tasks anew, so a small file imported 3,000 times is 21,000 tasks."""
    (tmp_path / "seven.yaml").write_text("- debug: {msg: hi}\n" * 7)
    pb, inv, marker = _importing(tmp_path, ["seven.yaml"] * 3000)
    code, out = invoke_bounded("play", str(pb), "-i", str(inv), seconds=30)
    _refused(code, out, "seven.yaml: task", "more than 20,000 tasks in all")
    assert not marker.exists()


def test_limits_leave_the_projects_files_alone():
    """The real inventory, playbooks and roles load, and far under the bounds: each playbook's whole load (its
    roles and task files) under a hundredth of the load's budget (a guard against limits set too tight)."""
    from engine.inventory.manager import Inventory
    from engine.parsing.yamlfile import MAX_LOAD_BYTES, MAX_LOAD_TASKS, MAX_LOAD_VALUES, LoadBudget
    from engine.playbook.plays import load_playbook

    Inventory(ROOT / "inventory.yaml")
    for playbook in sorted((ROOT / "playbooks").glob("*.yaml")):
        budget = LoadBudget(playbook)
        assert load_playbook(playbook, budget)
        assert budget.used["bytes"] > 0 and budget.used["tasks"] > 0, budget.used
        assert budget.used["bytes"] < MAX_LOAD_BYTES / 100, (playbook, budget.used)
        assert budget.used["values"] < MAX_LOAD_VALUES / 100, (playbook, budget.used)
        assert budget.used["tasks"] < MAX_LOAD_TASKS / 100, (playbook, budget.used)
    assert yaml.__with_libyaml__, "the C loader is the hot path of every run"
