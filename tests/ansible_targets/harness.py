"""Run one of ansible-core's integration targets as ansible-test runs it, with real ansible-playbook or with ours.

A role target (tasks/main.yml) becomes the role of a generated play on `testhost` (`ansible_connection: local`,
this python), `gather_facts` as its aliases say, `output_dir` set; a script target runs its runme.sh with
ansible-test's environment. Either way every `ansible-playbook` the target starts goes through a recording shim
that runs the chosen tool and keeps its output, and the tasks that passed are the PLAY RECAP's `ok` (changed
included), summed over the target's runs. Only the setup scaffolding is replaced (SCAFFOLDING): the tasks
themselves run as written."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.ansible_targets.source import ansible_core_version, cache_root, targets_dir

# The modules and keywords README claims, one target each (ansible-core's names).
TARGETS = ("lineinfile", "file", "copy", "template", "command_shell", "stat", "loops", "set_fact", "assert",
           "conditionals", "handlers", "blocks", "include_import", "tags")
TOOLS = ("ansible", "ours")
TARGET_TIMEOUT_S = 900
REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# ansible-test's setup targets, replaced by what they leave behind: prepare_tests is empty, setup_nobody makes a
# user Debian already has, setup_remote_tmp_dir makes a temporary folder (here made by the harness, its path a
# default of the role) and removes it in a handler.
SCAFFOLDING = {
    "prepare_tests": {},
    "setup_nobody": {},
    "setup_remote_tmp_dir": {"defaults/main.yml": "remote_tmp_dir: {remote_tmp_dir}\n"},
}

_RECAP_LINE = re.compile(r"^\S+\s+:\s+((?:\w+=\d+\s*)+)$", re.M)  # host : ok=N changed=N ... (any order)


@dataclass
class Outcome:
    target: str
    tool: str
    rc: int
    passed: int  # tasks ok (changed included), summed over every ansible-playbook run of the target
    failed: int
    runs: int
    seconds: float
    logs: list[str] = field(default_factory=list)
    stopped_by: str = ""  # the first error the target met (ours: what to build next)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "logs"}


def scratch_parent() -> str | None:
    """Where a target's folder goes: a tmpfs where there is one. On ext4 `lsattr` shows the extents flag `e`,
    which `file: attributes=A` cannot drop, so Ansible's own file target fails there under ansible-playbook
    too; on tmpfs the attribute tasks run as on the machines ansible-test uses."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def is_script_target(source: Path) -> bool:
    return (source / "runme.sh").is_file()


def lay_out(target: str, workdir: Path) -> Path:
    """workdir/targets/<target> and the setup roles it names; workdir/roles points at targets/ so a generated
    playbook in workdir finds them; workdir/inventory is ansible-test's posix inventory for the controller."""
    source = targets_dir()
    shutil.rmtree(workdir, ignore_errors=True)
    (workdir / "targets").mkdir(parents=True)
    (workdir / "output").mkdir()
    (workdir / "remote_tmp").mkdir()
    shutil.copytree(source / target, workdir / "targets" / target, symlinks=True)
    for name in os.listdir(source):
        if name.startswith(("setup_", "prepare_")) and name not in SCAFFOLDING and name != target:
            shutil.copytree(source / name, workdir / "targets" / name, symlinks=True)
    for name, files in SCAFFOLDING.items():
        role = workdir / "targets" / name
        (role / "tasks").mkdir(parents=True)
        (role / "tasks" / "main.yml").write_text("[]\n")
        for rel, text in files.items():
            (role / rel).parent.mkdir(parents=True, exist_ok=True)
            (role / rel).write_text(text.format(remote_tmp_dir=workdir / "remote_tmp"))
    (workdir / "roles").symlink_to("targets")
    (workdir / "inventory").write_text(
        "[testgroup]\ntesthost ansible_connection=local ansible_pipelining=yes "
        f"ansible_python_interpreter={interpreter()}\n")
    return workdir / "targets" / target


def _aliases(target_dir: Path) -> set[str]:
    path = target_dir / "aliases"
    return {line.split("#")[0].strip() for line in path.read_text().splitlines()} if path.exists() else set()


def role_playbook(target: str, workdir: Path, target_dir: Path) -> Path:
    """The play ansible-test writes for a role target (as JSON, which is YAML)."""
    gather = "gather_facts/no" not in _aliases(target_dir)
    play = {"hosts": "testhost", "gather_facts": gather, "vars": {"output_dir": str(workdir / "output")},
            "roles": [target]}
    path = workdir / f"{target}-play.yml"
    path.write_text(json.dumps([play], indent=4, sort_keys=True))
    return path


def environment(tool: str, workdir: Path) -> dict[str, str]:
    """ansible-test's environment for Ansible commands, the recording shim first on PATH."""
    shim = workdir / "bin"
    shim.mkdir(exist_ok=True)
    (shim / "ansible-playbook").symlink_to(HERE / "record_playbook.py")
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        PATH=f"{shim}:{venv_bin}:{env.get('PATH', '/usr/bin:/bin')}",
        ANSIBLE_FORCE_COLOR="false", ANSIBLE_NOCOLOR="true", ANSIBLE_FORCE_HANDLERS="true",
        ANSIBLE_HOST_PATTERN_MISMATCH="error", ANSIBLE_INVENTORY="/dev/null", ANSIBLE_DEPRECATION_WARNINGS="false",
        ANSIBLE_HOST_KEY_CHECKING="false", ANSIBLE_RETRY_FILES_ENABLED="false", ANSIBLE_DEVEL_WARNING="false",
        ANSIBLE_LIBRARY="/dev/null", PAGER="/bin/cat", ANSIBLE_LOCAL_TEMP=str(workdir / "ansible-tmp"),
        ANSIBLE_PYTHON_INTERPRETER="/set/ansible_python_interpreter/in/inventory",
        OUTPUT_DIR=str(workdir / "output"), INVENTORY_PATH=str(workdir / "inventory"),
        DFP_TARGET_TOOL=tool, DFP_TARGET_LOGS=str(workdir / "logs"), PYTHONPATH=str(REPO), LC_ALL="C.UTF-8",
    )
    (workdir / "logs").mkdir(exist_ok=True)
    return env


@contextmanager
def authorized_keys():
    """ansible-test's hosts have ~/.ssh/authorized_keys (copy's target duplicates it for the unprivileged user it
    makes); where this user has none, an empty one for the run, removed after it."""
    path = Path.home() / ".ssh" / "authorized_keys"
    made_dir = not path.parent.exists()
    made = not path.exists()
    if made:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        path.touch(mode=0o600)
    try:
        yield
    finally:
        if made:
            path.unlink(missing_ok=True)
        if made_dir:
            shutil.rmtree(path.parent, ignore_errors=True)


def interpreter() -> str:
    """The targets' python on the host: the system's where it has what this project's host modules import
    (Debian's python3-psutil and python3-tenacity), since targets run tasks as unprivileged users who cannot
    reach a python under /root; else this python."""
    system = "/usr/bin/python3"
    check = [system, "-c", "import psutil, tenacity"]
    if os.access(system, os.X_OK) and subprocess.run(check, capture_output=True, timeout=60).returncode == 0:
        return system
    return sys.executable


def run_target(target: str, tool: str, workdir: Path) -> Outcome:
    """Run `target` with `tool` ("ansible" or "ours") in `workdir` (made anew) and count what passed."""
    target_dir = lay_out(target, workdir)
    env = environment(tool, workdir)
    if is_script_target(target_dir):
        command, cwd = ["bash", "./runme.sh"], target_dir
    else:
        command = ["ansible-playbook", "-i", str(workdir / "inventory"), str(role_playbook(target, workdir, target_dir))]
        cwd = workdir
    start = time.monotonic()
    with authorized_keys():
        rc = _run(command, cwd, env)
    return count(target, tool, rc, time.monotonic() - start, workdir / "logs")


def _run(command: list[str], cwd: Path, env: dict) -> int:
    """The target's exit code; past TARGET_TIMEOUT_S its whole process group is killed and the code is 124."""
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        return proc.wait(timeout=TARGET_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        return 124


def count(target: str, tool: str, rc: int, seconds: float, logs: Path) -> Outcome:
    outcome = recount(target, tool, rc, seconds, [p.read_text(errors="replace") for p in sorted(logs.glob("*.log"))])
    if rc != 0:
        outcome.stopped_by = first_error(logs)
    return outcome


def first_error(logs: Path) -> str:
    """What stopped the target: its last run's last error line; a last run whose recap shows no failure means a
    check of the script after it failed (or, with no run at all, the script before any)."""
    runs = sorted(logs.glob("*.log"))
    if not runs:
        return "runme.sh failed before its first ansible-playbook"
    last = runs[-1]
    out = last.read_text(errors="replace")
    command = out.splitlines()[0][2:] if out else "ansible-playbook"
    lines = [*(last.with_suffix(".err").read_text(errors="replace").splitlines() if last.with_suffix(".err").exists()
               else []), *out.splitlines()]
    errors = [line for line in lines if line.startswith(("[ERROR]", "ERROR:"))] or [
        line for line in lines if line.startswith("fatal:")]
    recap = out[out.rfind("PLAY RECAP"):] if "PLAY RECAP" in out else ""
    if errors and not (recap and re.search(r"failed=0\s+skipped", recap) and "unreachable=0" in recap):
        return f"{command}: {errors[-1]}"
    return f"{command}: passed; the target's check after it failed"


def recount(target: str, tool: str, rc: int, seconds: float, texts: list[str]) -> Outcome:
    """The tasks that passed: each run's PLAY RECAP `ok` (changed included), summed over its hosts and runs."""
    passed = failed = 0
    for text in texts:
        recap = text[text.rfind("PLAY RECAP"):] if "PLAY RECAP" in text else ""
        for line in _RECAP_LINE.finditer(recap):
            counts = {k: int(v) for k, v in (pair.split("=") for pair in line.group(1).split())}
            passed += counts.get("ok", 0)
            failed += counts.get("failed", 0)
    return Outcome(target, tool, rc, passed, failed, len(texts), round(seconds, 1), texts)


def ansible_outcome(target: str, workdir: Path) -> Outcome:
    """Real ansible-playbook's outcome on `target`, run once per input: the release, this harness, the python
    and what the machine offers the targets (root, setfacl, the locale) make the key, and a run with the same
    key reads the kept outcome (DFP_ANSIBLE_TARGETS_RERUN=1 runs it again). Ansible's side takes about 15
    minutes on 2 cores and does not change while its inputs do not."""
    path = cache_root() / "outcomes" / f"{target}-{_outcome_key(target)}.json"
    if path.is_file() and not os.environ.get("DFP_ANSIBLE_TARGETS_RERUN"):
        data = json.loads(path.read_text())
        return recount(target, "ansible", data["rc"], data["seconds"], data["logs"])
    outcome = run_target(target, "ansible", workdir)
    if outcome.rc == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**outcome.as_dict(), "logs": outcome.logs}))
    return outcome


def _outcome_key(target: str) -> str:
    parts = [ansible_core_version(), platform.python_version(), platform.platform(), str(os.getuid()),
             str(shutil.which("setfacl")), str(scratch_parent()), target]
    parts += [inspect.getsource(f) for f in (lay_out, role_playbook, environment, run_target)]
    parts += [repr(SCAFFOLDING), (HERE / "record_playbook.py").read_text()]
    locales = subprocess.run(["locale", "-a"], capture_output=True, text=True, timeout=30).stdout
    return hashlib.sha256("\n".join([*parts, locales]).encode()).hexdigest()[:16]
