"""A playbook that brings itself in, through any kind of import or include, is one paragraph naming the cycle.

Task files importing themselves were refused already; a cycle through roles (include_role in one, import_role of
it in the other, a role's tasks_from including the role again, a task file and a role bringing in each other)
recursed until Python's RecursionError, a traceback. Each case runs the real CLI under the 1 GiB limit of
test_input_limits and must end with exit 4, one paragraph naming the file, the import and the cycle, and the
playbook's first task (which would change the host) not run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.test_input_limits import LOCAL_HOSTS, _refused, invoke_bounded

# Each case: the files (path -> text) under a fresh folder, the play's entry (`roles:` or a task), and what the
# message must name: the file and task where the cycle closes, the import, the cycle.
CASES = {
    "include_role-then-import_role": (
        {"roles/a/tasks.yaml": "- include_role: {name: b}\n", "roles/b/tasks.yaml": "- import_role: {name: a}\n"},
        "  roles: [a]\n",
        ["roles/b/tasks.yaml: task 1", "import_role a", "(role a -> role b -> role a)"],
    ),
    "import_role-then-include_role-from-a-task": (
        {"roles/a/tasks.yaml": "- import_role: {name: b}\n", "roles/b/tasks.yaml": "- include_role: {name: a}\n"},
        "  tasks:\n    - include_role: {name: a}\n",
        ["roles/b/tasks.yaml: task 1", "include_role a", "(role a -> role b -> role a)"],
    ),
    "a-role-including-itself": (
        {"roles/a/tasks.yaml": "- debug: {msg: main}\n- include_role: {name: a, tasks_from: more}\n",
         "roles/a/more.yaml": "- include_role: {name: a}\n"},
        "  roles: [a]\n",
        ["roles/a/more.yaml: task 1", "include_role a", "(role a -> role a (tasks_from more) -> role a)"],
    ),
    "a-task-file-and-a-role": (
        {"steps.yaml": "- include_role: {name: a}\n", "roles/a/tasks.yaml": "- import_tasks: ../../steps.yaml\n"},
        "  tasks:\n    - include_tasks: steps.yaml\n",
        ["roles/a/tasks.yaml: task 1", "import_tasks ../../steps.yaml", "steps.yaml -> role a ->", "imports itself"],
    ),
    "a-role-in-its-own-handlers": (
        {"roles/a/tasks.yaml": "- debug: {msg: main}\n", "roles/a/handlers.yaml": "- import_tasks: again.yaml\n",
         "roles/a/again.yaml": "- import_tasks: handlers.yaml\n"},
        "  roles: [a]\n",
        ["roles/a/again.yaml: task 1", "import_tasks handlers.yaml", "(role a (handlers) ->", "imports itself"],
    ),
}


def _write(root: Path, files: dict[str, str], play: str) -> tuple[Path, Path, Path]:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    marker = root / "marker"
    pb = root / "pb.yaml"
    pb.write_text(f"- hosts: all\n  gather_facts: false\n  pre_tasks:\n    - name: Would change the host\n"
                  f"      file: {{path: {marker}, state: directory}}\n{play}")
    inv = root / "inv.yaml"
    inv.write_text("all:\n" + LOCAL_HOSTS)
    return pb, inv, marker


@pytest.mark.parametrize("case", list(CASES))
def test_a_cycle_through_any_import_is_one_paragraph_naming_it(tmp_path, case):
    files, play, needles = CASES[case]
    pb, inv, marker = _write(tmp_path, files, play)
    code, out = invoke_bounded("play", str(pb), "-i", str(inv), seconds=30)
    _refused(code, out, *needles, "Remove the import (or include) that closes the cycle")
    assert "RecursionError" not in out
    assert not marker.exists()


def test_a_role_used_twice_without_a_cycle_still_loads(tmp_path):
    """The rule is about a file inside itself, not a file read twice: two roles importing a third, twice each."""
    files = {"roles/common/tasks.yaml": "- debug: {msg: common}\n",
             "roles/a/tasks.yaml": "- import_role: {name: common}\n- include_role: {name: common}\n",
             "roles/b/tasks.yaml": "- import_role: {name: common}\n- import_tasks: ../a/tasks.yaml\n"}
    pb, inv, marker = _write(tmp_path, files, "  roles: [a, b]\n")
    code, out = invoke_bounded("play", str(pb), "-i", str(inv), seconds=30)
    assert code == 0, out[-3000:]
    assert out.count('"msg": "common"') == 5, out  # debug's msg, as ansible-playbook prints it
    assert marker.exists()


def test_a_chain_of_roles_deeper_than_the_bound_is_one_paragraph(tmp_path):
    """The depth bound of task files (20) holds for every kind of import: 25 roles each including the next."""
    files = {f"roles/r{i}/tasks.yaml": f"- include_role: {{name: r{i + 1}}}\n" for i in range(25)}
    files["roles/r25/tasks.yaml"] = "- debug: {msg: deep}\n"
    pb, inv, marker = _write(tmp_path, files, "  roles: [r0]\n")
    code, out = invoke_bounded("play", str(pb), "-i", str(inv), seconds=30)
    _refused(code, out, "roles/r18/tasks.yaml: task 1", "include_role r19", "more than 20 deep", "MAX_IMPORT_DEPTH")
    assert not marker.exists()
