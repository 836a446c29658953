"""become through sudo against real sshd hosts and real sudo (users: tests/become/conftest.py)."""

from __future__ import annotations

import json
import os
import pwd
import time
from pathlib import Path

import pytest
import yaml

from engine.api import run_playbook
from tests.become.conftest import NO_SUDO_USER, NOPASSWD_USER, PASSWORD_USER, TARGET_USER

pytestmark = pytest.mark.ssh


def playbook(tmp_path: Path, tasks: list, **play) -> Path:
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([dict({"hosts": "all", "gather_facts": False, "tasks": tasks}, **play)]))
    return path


def inventory(tmp_path: Path, host_vars: dict) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"h1": host_vars}}}))
    return path


def mkdir(path: Path, **keywords) -> dict:
    return dict({"name": f"make {path.name}", "file": {"path": str(path), "state": "directory"}}, **keywords)


def owner(path: Path) -> str:
    return pwd.getpwuid(os.stat(path).st_uid).pw_name


def failure(res, task: str) -> str:
    [r] = res.find(task)
    assert r.status == "failed", r.msg
    return r.msg


def test_task_become_makes_a_root_owned_folder_and_the_next_task_runs_as_the_login_user(
        become_users, shared_tmp, tmp_path):
    root_dir, user_dir = shared_tmp / "as-root", shared_tmp / "as-login"
    pb = playbook(tmp_path, [mkdir(root_dir, become=True), mkdir(user_dir)])
    res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(NOPASSWD_USER)))
    assert res.exit_code == 0, res.tasks
    assert owner(root_dir) == "root"
    assert owner(user_dir) == NOPASSWD_USER


def test_host_var_become_runs_every_task_as_root(become_users, shared_tmp, tmp_path):
    target = shared_tmp / "host-var"
    pb = playbook(tmp_path, [{"name": "who", "facts": {}, "register": "who"}, mkdir(target)])
    res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(NOPASSWD_USER, ansible_become=True)))
    assert res.exit_code == 0, res.tasks
    assert owner(target) == "root"
    assert res.registered["h1"]["who"]["facts"]["user"] == "root"


def test_become_false_on_a_task_overrides_the_host_var(become_users, shared_tmp, tmp_path):
    target = shared_tmp / "not-root"
    pb = playbook(tmp_path, [mkdir(target, become=False)])
    res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(NOPASSWD_USER, ansible_become=True)))
    assert res.exit_code == 0, res.tasks
    assert owner(target) == NOPASSWD_USER


def test_become_user_templated_runs_as_that_user_and_ships_it_the_runtime(become_users, shared_tmp, tmp_path):
    """The target user's cache is empty at session start: the run had to give its worker the runtime."""
    target = shared_tmp / "as-target"
    pb = playbook(tmp_path, [mkdir(target, become=True, become_user="{{service_user}}")],
                  vars={"service_user": TARGET_USER})
    res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(NOPASSWD_USER)))
    assert res.exit_code == 0, res.tasks
    assert owner(target) == TARGET_USER
    runtimes = Path(pwd.getpwnam(TARGET_USER).pw_dir) / ".cache" / "dflash-provision" / "runtime"
    assert any((d / "dflash_host" / "module.py").is_file() for d in runtimes.iterdir())


def test_copy_with_become_uploads_through_the_root_worker(become_users, shared_tmp, tmp_path):
    """SFTP runs as the login user and cannot write into a root-owned folder; the become worker can."""
    src = tmp_path / "files"
    src.mkdir()
    (src / "a.txt").write_text("hello from the control node\n")
    dest = shared_tmp / "root-dest"
    pb = playbook(tmp_path, [mkdir(dest, become=True),
                             {"name": "copy", "copy": {"src": str(src / "a.txt"), "dest": f"{dest}/a.txt"},
                              "become": True}])
    res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(NOPASSWD_USER)))
    assert res.exit_code == 0, res.tasks
    assert (dest / "a.txt").read_text() == "hello from the control node\n"
    assert owner(dest / "a.txt") == "root"


def test_password_sudo_with_the_password_and_with_a_password_file(become_users, shared_tmp, tmp_path):
    password = become_users.passwords[PASSWORD_USER]
    pw_file = tmp_path / "become-pass"
    pw_file.write_text(password + "\n")
    sources = ({"ansible_become_password": password}, {"ansible_become_password_file": str(pw_file)},
               {"ansible_become_password": password + "\n"})  # a YAML `|` value ends in a line break
    for i, source in enumerate(sources):
        target = shared_tmp / f"pw-{i}"
        pb = playbook(tmp_path, [mkdir(target, become=True)])
        res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(PASSWORD_USER, **source)))
        assert res.exit_code == 0, res.tasks
        assert owner(target) == "root"


def test_a_password_with_a_line_break_inside_is_refused_without_showing_it(become_users, shared_tmp, tmp_path):
    target = shared_tmp / "pw-broken"
    pb = playbook(tmp_path, [mkdir(target, become=True)])
    res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(PASSWORD_USER, ansible_become_password="zqzq\nxwxw")))
    assert res.exit_code == 2 and not target.exists()
    msg = failure(res, f"make {target.name}")
    assert "line break" in msg and "zqzq" not in msg and "xwxw" not in msg


def test_wrong_password_is_a_clear_error_changes_nothing_and_is_never_shown(
        become_users, shared_tmp, tmp_path, capsys):
    """ansible_become_pass is not named like a secret (no 'password'): become itself must mask its value, even
    where a task prints it."""
    wrong = "Wr0ng-" + become_users.passwords[PASSWORD_USER][::-1]
    target = shared_tmp / "never-made"
    pb = playbook(tmp_path, [{"name": "show", "debug": {"msg": "pw={{ ansible_become_pass }}"}, "become": True},
                             mkdir(target, become=True), mkdir(shared_tmp / "never-either", become=True)])
    report, junit = tmp_path / "r.json", tmp_path / "j.xml"
    started = time.monotonic()
    res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(PASSWORD_USER, ansible_become_pass=wrong)),
                       report=str(report), junit=str(junit), quiet=False, verbose=2)
    assert time.monotonic() - started < 20
    assert res.exit_code == 2
    msg = failure(res, f"make {target.name}")
    assert "incorrect password" in msg and "Nothing ran as that user" in msg
    assert not target.exists() and not (shared_tmp / "never-either").exists()
    assert res.find("show")[0].msg == "pw=********"
    shown = capsys.readouterr().out + report.read_text() + junit.read_text() + json.dumps(res.tasks)
    assert wrong not in shown


def test_password_required_but_not_given_fails_at_once_naming_the_variables(become_users, shared_tmp, tmp_path):
    target = shared_tmp / "no-password"
    pb = playbook(tmp_path, [mkdir(target, become=True)])
    started = time.monotonic()
    res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(PASSWORD_USER)))
    assert time.monotonic() - started < 10  # sudo -n: no wait for a password that never comes
    msg = failure(res, f"make {target.name}")
    assert "ansible_become_password" in msg and "ansible_become_password_file" in msg
    assert not target.exists()


def test_user_without_sudo_rights_is_a_clear_error(become_users, shared_tmp, tmp_path, capsys):
    password = become_users.passwords[NO_SUDO_USER]
    target = shared_tmp / "no-rights"
    pb = playbook(tmp_path, [mkdir(target, become=True)])
    res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(NO_SUDO_USER, ansible_become_password=password)),
                       quiet=False)
    msg = failure(res, f"make {target.name}")
    assert "may not run commands as root" in msg and "sudoers" in msg
    assert not target.exists()
    assert password not in capsys.readouterr().out


def test_missing_password_file_is_a_clear_error(become_users, shared_tmp, tmp_path):
    target = shared_tmp / "no-file"
    pb = playbook(tmp_path, [mkdir(target, become=True)])
    res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(
        PASSWORD_USER, ansible_become_password_file=str(tmp_path / "absent"))))
    msg = failure(res, f"make {target.name}")
    assert "ansible_become_password_file" in msg and "cannot be read" in msg
    assert not target.exists()


def test_bad_become_user_template_result_is_refused(become_users, shared_tmp, tmp_path):
    target = shared_tmp / "bad-user"
    pb = playbook(tmp_path, [mkdir(target, become=True, become_user="{{who}}")], vars={"who": "-u root"})
    res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(NOPASSWD_USER)))
    msg = failure(res, f"make {target.name}")
    assert "not a user name" in msg
    assert not target.exists()


def test_play_become_gathers_facts_and_takes_the_lock_as_root(become_users, shared_tmp, tmp_path):
    pb = playbook(tmp_path, [{"name": "who", "debug": {"msg": "{{ facts.user }}"}}], gather_facts=True, become=True,
                  vars={"dfp_root": str(shared_tmp / "dfp")})
    res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(NOPASSWD_USER)))
    assert res.exit_code == 0, res.tasks
    assert res.find("who")[0].msg == "root"
    # made by root through sudo, the lock file belongs to the login user: a later run without become takes it too
    assert owner(shared_tmp / "dfp" / ".dflash-provision.lock") == NOPASSWD_USER
    plain = playbook(tmp_path, [{"name": "who", "debug": {"msg": "{{ facts.user }}"}}], gather_facts=True,
                     vars={"dfp_root": str(shared_tmp / "dfp")})
    again = run_playbook(plain, inventory(tmp_path, become_users.host_vars(NOPASSWD_USER)))
    assert again.exit_code == 0, again.tasks
    assert again.find("who")[0].msg == NOPASSWD_USER


def test_host_var_become_gathers_facts_as_root(become_users, tmp_path):
    pb = playbook(tmp_path, [{"name": "who", "debug": {"msg": "{{ facts.user }}"}}], gather_facts=True)
    res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(NOPASSWD_USER, ansible_become=True)))
    assert res.exit_code == 0, res.tasks
    assert res.find("who")[0].msg == "root"



def test_sudo_missing_on_the_host_is_named(tmp_path):
    """What a shell without sudo prints (taken from a real sh with an empty PATH) reads as 'not installed'."""
    import subprocess

    from engine.connection.become import Become, refusal

    said = subprocess.run(["/bin/sh", "-c", "sudo -n true"], env={"PATH": str(tmp_path)}, capture_output=True,
                          text=True).stderr
    msg = refusal("h1", Become("root"), said, answered=False)
    assert "sudo is not installed" in msg and "nothing was changed" in msg


def _render_task(shared_tmp: Path, **keywords) -> dict:
    """vllm_server's render in check mode (systemctl is not run) with systemd said to be PID 1."""
    models = shared_tmp / "models"
    for name, arch in (("target", "Qwen3ForCausalLM"), ("dflash", "DFlashDraftModel")):
        (models / name).mkdir(parents=True, exist_ok=True)
        (models / name / "config.json").write_text(json.dumps({"architectures": [arch]}))
    os.chmod(shared_tmp, 0o777)
    args = {"state": "rendered", "systemd_present": True, "pidfile": f"{shared_tmp}/dfp/run/vllm.pid",
            "log": f"{shared_tmp}/dfp/logs/vllm.log", "root": f"{shared_tmp}/dfp", "venv_python": "/usr/bin/python3",
            "target_model": str(models / "target"), "drafter_model": str(models / "dflash"), "flavor": "cpu",
            "port": 18123, "num_speculative_tokens": 3, "unit_dir": f"{shared_tmp}/units"}
    return dict({"name": "render", "vllm_server": args, "check_mode": True, "register": "launch"}, **keywords)


def test_vllm_server_uses_a_systemd_unit_with_become_and_warns_without(become_users, shared_tmp, tmp_path):
    inv = inventory(tmp_path, become_users.host_vars(NOPASSWD_USER))
    plain = run_playbook(playbook(tmp_path, [_render_task(shared_tmp)]), inv, diff=True)
    assert plain.exit_code == 0, plain.tasks
    [r] = plain.find("render")
    assert r.result["diff"]["after"]["mode"] == "process"
    assert any("unsupervised" in w and "become: true" in w for w in r.result.get("warnings", [])), r.result
    rooted = run_playbook(playbook(tmp_path, [_render_task(shared_tmp, become=True)]), inv, diff=True)
    assert rooted.exit_code == 0, rooted.tasks
    [r] = rooted.find("render")
    assert r.result["diff"]["after"]["mode"] == "systemd"
    assert not any("unsupervised" in w for w in r.result.get("warnings", []))


def test_gpu_cleanup_as_root_stops_the_login_users_named_holder_but_not_another_users(
        become_users, shared_tmp, tmp_path, gpu):
    """Through sudo the login user's processes are the operator's own (SUDO_UID); a third user's still need
    gpu_cleanup_allow_other_users."""
    mine = gpu.start({"name": "mine", "mib": 2048}, user=NOPASSWD_USER).procs["mine"]
    theirs = gpu.start({"name": "theirs", "mib": 2048}, user=TARGET_USER).procs["theirs"]
    args = {"pidfile": str(shared_tmp / "none.pid"), "nvidia_smi": gpu.nvidia_smi, "grace_s": 0.5, "timeout_s": 3,
            "device_prefix": gpu.device_prefix, "kill_foreign": [mine.pid, theirs.pid]}
    pb = playbook(tmp_path, [{"name": "cleanup", "gpu_cleanup": args, "become": True}])
    res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(NOPASSWD_USER)))
    [r] = res.find("cleanup")
    actions = {f["pid"]: (f["action"], f["reason"]) for f in r.result["foreign"]}
    assert actions[mine.pid][0] == "stopped", actions
    assert actions[theirs.pid][0] == "left" and "another user" in actions[theirs.pid][1]
    assert theirs.is_running()


def test_play_become_with_a_wrong_password_fails_the_host_before_the_lock_and_facts(become_users, shared_tmp, tmp_path):
    dfp_root = shared_tmp / "dfp-wrong"
    pb = playbook(tmp_path, [mkdir(shared_tmp / "never-play")], gather_facts=True, become=True,
                  vars={"dfp_root": str(dfp_root)})
    res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(PASSWORD_USER, ansible_become_password="nope1234")))
    assert res.exit_code == 2
    assert "incorrect password" in failure(res, "Become")
    assert not res.find("Gathering facts") and not (shared_tmp / "never-play").exists()
    assert not (dfp_root / ".dflash-provision.lock").exists()


def test_a_lock_under_home_is_the_login_users_with_and_without_become(become_users, tmp_path):
    """dfp_root under `~`: the lock is in the login user's home whoever takes it, so a run with become and one
    without exclude each other (sudo -H would otherwise put it in root's home)."""
    import shutil
    import uuid

    name = f"dfp-lock-{uuid.uuid4().hex[:8]}"
    home = Path(pwd.getpwnam(NOPASSWD_USER).pw_dir)
    try:
        pb = playbook(tmp_path, [{"name": "who", "debug": {"msg": "{{ facts.user }}"}}], gather_facts=True,
                      become=True, vars={"dfp_root": f"~/{name}"})
        res = run_playbook(pb, inventory(tmp_path, become_users.host_vars(NOPASSWD_USER)))
        assert res.exit_code == 0, res.tasks
        assert (home / name / ".dflash-provision.lock").is_file()
        assert owner(home / name / ".dflash-provision.lock") == NOPASSWD_USER
        assert not (Path("/root") / name).exists()
    finally:
        shutil.rmtree(home / name, ignore_errors=True)
        shutil.rmtree(Path("/root") / name, ignore_errors=True)


def test_become_and_files_over_a_kept_connection(become_users, shared_tmp, tmp_path, kept_connections):
    """ControlPersist: the login user's worker is kept between runs; a become worker and SFTP go over a connection
    of the run's own, and the root worker is not kept."""
    dest = shared_tmp / "kept-root"
    src = tmp_path / "a.txt"
    src.write_text("kept\n")
    pb = playbook(tmp_path, [mkdir(dest, become=True),
                             {"name": "copy", "copy": {"src": str(src), "dest": f"{dest}/a.txt"}, "become": True},
                             {"name": "as login", "copy": {"src": str(src), "dest": f"{shared_tmp}/login.txt"}},
                             {"name": "pids", "command": {"argv": ["sh", "-c", "echo $PPID"]}}])
    inv = inventory(tmp_path, become_users.host_vars(
        NOPASSWD_USER, ansible_ssh_common_args="-o ControlMaster=auto -o ControlPersist=60"))
    pids = []
    for _ in range(2):
        res = run_playbook(pb, inv)
        assert res.exit_code == 0, res.tasks
        pids.append(res.find("pids")[0].result["stdout"])
    assert pids[0] == pids[1]
    assert owner(dest / "a.txt") == "root" and (dest / "a.txt").read_text() == "kept\n"
    assert owner(shared_tmp / "login.txt") == NOPASSWD_USER
