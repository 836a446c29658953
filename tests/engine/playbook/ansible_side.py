"""Running one playbook with real ansible-playbook and with ours on this machine (`ansible_connection: local`),
for tests that compare the two: per task the status and, for debug, the message; and the recap."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from engine.api import RunResult, run_playbook
from tests.helpers import required_ansible_tool

HOST = "h"
INVENTORY = {"all": {"hosts": {HOST: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}
COUNTS = ("ok", "changed", "failed", "skipped", "rescued", "ignored")
_LINE = re.compile(r"^(ok|changed|skipping|fatal|failed): \[" + HOST + r"( -> [^]]+)?\]")
_VAR_SHOWN = re.compile(r"^[\w.\[\]'\"]+ = ")  # our debug var=X line (Ansible's is no "msg")
_STATUS = {"skipping": "skipped", "fatal": "failed"}


def write(path: Path, data) -> Path:
    """A YAML file (its folders made), as a playbook or a role's file is written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def local_inventory(folder: Path, host: str = "h1") -> Path:
    """An INI inventory of one `ansible_connection: local` host on this python."""
    path = folder / "inv"
    path.write_text(f"{host} ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    return path


def real_ansible_playbook(playbook: Path, inventory: Path, env: dict | None = None, timeout: float = 300,
                          args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Real ansible-playbook on `playbook` (command-line `args` after it), in its folder, with a clean environment
    (HOME and the temp folder there)."""
    base = {"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(playbook.parent),
            "ANSIBLE_LOCAL_TEMP": str(playbook.parent / ".ansible-tmp")}
    return subprocess.run([str(required_ansible_tool("ansible-playbook")), "-i", str(inventory), str(playbook), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=playbook.parent, env={**base, **(env or {})})


def both_succeed(theirs: Path, mine: Path, inventory: Path) -> tuple[subprocess.CompletedProcess, RunResult]:
    """(ansible-playbook's process, our run): playbook `theirs` run by real ansible-playbook and `mine` by ours (the
    same file or two alike), on one inventory file; both asserted to succeed."""
    proc = real_ansible_playbook(theirs, inventory)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    res = run_playbook(str(mine), inventory=str(inventory))
    assert res.exit_code == 0, res.error or [t for t in res.tasks if t.get("status") == "failed"]
    return proc, res


def each_tool_writes(work: Path, playbook, inventory: dict, env: dict | None = None) -> tuple[Path, Path]:
    """(Ansible's folder, ours): `playbook(folder)` run by real ansible-playbook (`env` on top of its clean one) and
    by ours on the same inventory, each writing into its own folder (work/ansible, work/ours), both asserted to
    succeed; for tests that compare what the playbook wrote out."""
    inv = write(work / "inv.yaml", inventory)
    folders = []
    for side in ("ansible", "ours"):
        out = work / side
        out.mkdir()
        book = write(work / f"{side}.yaml", playbook(out))
        if side == "ansible":
            proc = real_ansible_playbook(book, inv, env)
            assert proc.returncode == 0, f"ansible-playbook failed:\n{proc.stdout}\n{proc.stderr}"
        else:
            res = run_playbook(str(book), inventory=inventory)
            assert res.exit_code == 0, (res.error, [(t["task"], t["msg"]) for t in res.tasks if t["status"] == "failed"])
        folders.append(out)
    return folders[0], folders[1]


def ansible(playbook: Path) -> tuple[int, list[tuple[str, str]], dict, list[str]]:
    """(exit code, [(task, status)], recap, debug messages) of real ansible-playbook on the local host."""
    inventory = write(playbook.parent / "inventory.yml", INVENTORY)
    proc = real_ansible_playbook(playbook, inventory, {"ANSIBLE_GATHERING": "explicit",
                                                       "ANSIBLE_DEPRECATION_WARNINGS": "0"}, timeout=120)
    out = proc.stdout
    steps: list[tuple[str, str]] = []
    task = ""
    for line in out.splitlines():
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            task = line.split("[", 1)[1].rsplit("]", 1)[0]
        elif line.startswith("included: ") and line.endswith(f"for {HOST}"):
            steps.append((task, "ok"))
        elif match := _LINE.match(line):
            steps.append((task, _STATUS.get(match.group(1), match.group(1))))
    recap = re.search(HOST + r"\s*:\s*(.*)", out.rpartition("PLAY RECAP")[2])
    counts = dict(re.findall(r"(\w+)=(\d+)", recap.group(1))) if recap else {}
    said = [json.loads(m) for m in re.findall(r'^    "msg": (".*")$', out, re.M)]
    return (proc.returncode, steps, {k: int(counts.get(k, 0)) for k in COUNTS} if counts else {"output": out + proc.stderr},
            [m for m in said if m != "All assertions passed"])


def ours(playbook: Path) -> tuple[int, list[tuple[str, str]], dict, list[str]]:
    """The same of our engine (meta tasks, which neither tool shows as a task line, left out)."""
    res = run_playbook(str(playbook), inventory=INVENTORY)
    steps = [(f"{r.role} : {r.task}" if r.role else r.task, r.status) for r in res.results if r.module != "meta"]
    recap = res.recap.get(HOST)
    counts = {k: int(recap[k]) for k in COUNTS} if recap else {"error": res.error}
    said = [r.msg for r in res.results if r.module == "debug" and r.status == "ok" and not _VAR_SHOWN.match(r.msg)]
    return res.exit_code, steps, counts, said


def same_as_ansible(playbook: Path) -> tuple:
    """Both tools' (exit code, steps, recap), asserted equal; returned for further checks. Each tool runs its own
    copy of the playbook's folder (`ansible/`, `ours/` beside it), so what one writes under `{{ playbook_dir }}`
    the other does not find."""
    copies = {}
    for tool in ("ansible", "ours"):
        copies[tool] = playbook.parent.parent / f"{playbook.parent.name}-{tool}"
        shutil.copytree(playbook.parent, copies[tool])
    theirs, mine = ansible(copies["ansible"] / playbook.name), ours(copies["ours"] / playbook.name)
    assert mine == theirs, f"ansible-playbook: {theirs}\nours: {mine}"
    return mine
