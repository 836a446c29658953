"""What a host returns never chooses what runs on the control node (engine/run/trust.py), for every module.

A hostile host (tests/security/hostile_host.py, a real sshd host) answers attacker-chosen strings; each module's
every declared code argument (CODE_ARGS), the task's `environment` and `delegate_to` are built from those answers
in a task that runs on the control node (delegate_to: localhost). Every such task is refused before anything runs:
the canary each payload would create is never there. The same values as data (content, a message), and the
control node's own answers steering its own tasks, still work.
"""

from __future__ import annotations

import ast

import pytest
import yaml

from engine.api import run_playbook
from engine.playbook.modulespec import LIBRARY, code_args, module_args_spec, modules
from tests.security.hostile_host import answers, payloads, shell_payload

pytestmark = pytest.mark.ssh

# Loaded, not run per host: their file names are read when the playbook loads (docs/ANSIBLE.md).
LOAD_TIME = {"include_tasks", "include_role"}
# Argument names that always decide what runs or which file or address is touched, wherever a module has them.
CODE_LIKE = {"argv", "cmd", "chdir", "creates", "removes", "executable", "env", "path", "dest", "src", "python",
             "venv_python", "url", "pidfile", "root", "log", "validate", "nvidia_smi", "hf_home", "unit_dir",
             "state_file", "textfile_dir", "tool_dir", "wheelhouse", "find_links", "index_url", "source_dir"}


def test_every_module_declares_its_code_arguments():
    """A module without CODE_ARGS is refused at load (engine/playbook/modulespec.py); each declared name is an argument,
    and every argument named like code is declared."""
    for path in sorted(LIBRARY.glob("*.py")):
        if path.name.startswith("_"):
            continue
        names = {t.id for node in ast.parse(path.read_text()).body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)}
        assert "CODE_ARGS" in names, f"{path.name} declares no CODE_ARGS"
    for name in modules():
        args = module_args_spec(name) or {}
        declared = set(code_args(name))
        assert declared <= set(args) or not args, (name, declared - set(args))
        assert CODE_LIKE & set(args) <= declared, (name, (CODE_LIKE & set(args)) - declared)


def _required(module: str, but: str) -> dict:
    """Plain values for the module's other required arguments (the load checks them before any host)."""
    out = {}
    for name, spec in (module_args_spec(module) or {}).items():
        if name == but or not (isinstance(spec, dict) and spec.get("required")):
            continue
        kind = spec.get("type", "str")
        out[name] = (spec["choices"][0] if spec.get("choices") else
                     {"int": 1, "float": 1.0, "bool": False, "list": [], "dict": {}}.get(kind, "/nonexistent-dfp"))
    return out


def _steering_tasks(canary) -> list[dict]:
    """One task per module and code argument, built from the hostile answer, run on the control node."""
    values = payloads(canary)
    tasks = []
    for module in sorted(modules()):
        if module in LOAD_TIME:
            continue
        for arg in code_args(module):
            kind = "command" if arg in ("cmd", "argv", "executable") else "env" if arg == "env" else "path"
            value = "{{ out.stdout }}" if kind != "env" else {"BASH_ENV": "{{ out.stdout }}"}
            if arg == "argv":
                value = ["{{ out.stdout_lines[0] }}"]
            tasks.append({"name": f"{module}.{arg}", module: {**_required(module, arg), arg: value},
                          "delegate_to": "localhost",
                          "ignore_errors": True, "vars": {"kind": kind, "canary_payload": values[kind]}})
    return tasks


@pytest.fixture
def hostile(tmp_path, ssh_host, inventory_file, shared_tmp):
    inv = inventory_file(hosts=[ssh_host], host_vars={ssh_host.name: {"dfp_root": str(shared_tmp / "root")}})
    canary = tmp_path / "canary"

    def run(tasks, payload=None):
        book = tmp_path / "pb.yaml"
        book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                         "tasks": answers(payload or shell_payload(canary)) + tasks}], sort_keys=False))
        return run_playbook(str(book), inventory=str(inv))

    return run, canary


def test_no_code_argument_of_any_module_is_built_from_a_hosts_answer_on_the_control_node(hostile):
    run, canary = hostile
    tasks = _steering_tasks(canary)
    assert len(tasks) > 60  # every module's every code argument
    for payload in (shell_payload(canary), str(canary)):
        res = run(tasks, payload)
        for task in tasks:
            (r,) = res.find(task["name"])
            module, arg = task["name"].split(".")
            assert r.status == "failed" and r.ignored, (task["name"], r.status, r.msg)
            # shell code (shell, raw) is refused on any host (engine/run/trust.py)
            shell = f"the {'raw' if module == 'raw' else 'shell'} {arg} is built from what a host returned"
            assert (f"argument '{arg}' is built from what" in r.msg and "runs on the control node" in r.msg) \
                or shell in r.msg, r.msg
        assert not canary.exists() and not (canary.parent / "canary.sh").exists()


def test_the_environment_and_delegate_to_are_never_a_hosts_answer(hostile, ssh_host):
    run, canary = hostile
    (canary.parent / "env.sh").write_text(f"touch {canary}\n")
    tasks = [
        {"name": "bash env", "command": {"argv": ["bash", "-c", "true"]}, "delegate_to": "localhost",
         "environment": {"BASH_ENV": "{{ out.stdout }}"}, "ignore_errors": True},
        {"name": "env as a whole", "command": {"argv": ["bash", "-c", "true"]}, "delegate_to": "localhost",
         "environment": "{{ {'BASH_ENV': answer} }}", "ignore_errors": True},
        {"name": "delegate", "command": {"argv": ["true"]}, "delegate_to": "{{ out.stdout }}", "ignore_errors": True},
        {"name": "delegate via fact", "debug": {"msg": "x"}, "delegate_to": "{{ answer }}", "ignore_errors": True},
    ]
    res = run(tasks, str(canary.parent / "env.sh"))
    for name in ("bash env", "env as a whole"):
        (r,) = res.find(name)
        assert r.status == "failed" and "environment is built from what h1 returned" in r.msg, r.msg
    res = run(tasks[2:], "localhost")
    for name in ("delegate", "delegate via fact"):
        (r,) = res.find(name)
        assert r.status == "failed" and "delegate_to gave 'localhost', built from what" in r.msg, r.msg
    assert not canary.exists()


def test_a_hosts_answer_is_fine_as_data_and_on_its_own_host(hostile, tmp_path):
    run, canary = hostile
    dest = tmp_path / "copied.txt"
    tasks = [
        {"name": "content", "copy": {"content": "{{ out.stdout }}", "dest": str(dest)}, "delegate_to": "localhost"},
        {"name": "own host", "command": {"argv": ["test", "-n", "{{ out.stdout }}"]}},
        {"name": "shown", "debug": {"msg": "{{ answer }}"}, "delegate_to": "localhost"},
        {"name": "checked against a list", "command": {"argv": ["{{ item }}"]}, "delegate_to": "localhost",
         "loop": ["true"], "when": "out.stdout != item"},
    ]
    res = run(tasks)
    assert res.exit_code == 0, res.tasks
    assert dest.read_text() == shell_payload(canary) and not canary.exists()


def test_the_control_nodes_own_answers_steer_its_own_tasks(tmp_path):
    marker = tmp_path / "ran"
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"here": {"ansible_connection": "local",
                                                             "dfp_root": str(tmp_path / "root")}}}}))
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "which", "command": {"argv": ["printf", "%s", "touch"]}, "register": "prog"},
        {"name": "run it", "command": {"argv": ["{{ prog.stdout }}", str(marker)]}}]}]))
    res = run_playbook(str(book), inventory=str(inv))
    assert res.exit_code == 0 and marker.exists(), res.tasks
