"""Jump hosts and ssh options through a real bastion sshd to a target only the bastion can reach (conftest.py)."""

from __future__ import annotations

import shlex
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from engine.api import run_playbook
from engine.connection.ssh_connect import open_connection
from engine.connection.ssh_options import SshOptionError
from engine.errors import HostUnreachable

pytestmark = pytest.mark.ssh


def _whoami_and_where(conn) -> tuple[str, str]:
    """Who we are on the far end and the address its sshd saw us on (SSH_CONNECTION's server address)."""
    _, stdout, _ = conn.client.exec_command("echo $(id -un) $SSH_CONNECTION")
    out = stdout.read().decode().split()
    return out[0], out[3]


def _reach(host_from, name: str, vars: dict) -> tuple[str, str]:
    conn = open_connection(host_from(name, vars))
    try:
        return _whoami_and_where(conn)
    finally:
        conn.close()


def _write_config(lab, path: Path, text: str) -> str:
    path.write_text(text.format(lab=lab))
    return str(path)


def test_the_target_cannot_be_reached_directly(jump_lab, host_from):
    """The premise of every other test: from the control node the target's address and port lead nowhere."""
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((jump_lab.target, jump_lab.port), timeout=3)
    with pytest.raises(ConnectionRefusedError):
        open_connection(host_from("t", jump_lab.target_vars()))


def test_proxyjump_in_ansible_ssh_common_args(jump_lab, host_from):
    before = jump_lab.accepted_logins("bastion")
    vars = jump_lab.target_vars(ansible_ssh_common_args=f"-o ProxyJump={jump_lab.jump}")
    assert _reach(host_from, "t", vars) == (jump_lab.user, jump_lab.target)
    assert jump_lab.accepted_logins("bastion") == before + 1


def test_dash_j_in_ansible_ssh_extra_args(jump_lab, host_from):
    vars = jump_lab.target_vars(ansible_ssh_extra_args=f"-J {jump_lab.jump}")
    assert _reach(host_from, "t", vars) == (jump_lab.user, jump_lab.target)


def test_a_chain_of_two_jumps(jump_lab, host_from):
    """-J a,b: the second jump (the bastion again) is reached through the first."""
    before = jump_lab.accepted_logins("bastion")
    vars = jump_lab.target_vars(ansible_ssh_common_args=f"-J {jump_lab.jump},{jump_lab.jump}")
    assert _reach(host_from, "t", vars) == (jump_lab.user, jump_lab.target)
    assert jump_lab.accepted_logins("bastion") == before + 2


def test_proxycommand_with_ssh_dash_w(jump_lab, host_from):
    """OpenSSH's own client as the ProxyCommand, %h and %p expanded to the target's address and port."""
    ssh = (f"ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile={jump_lab.known_hosts} "
           f"-i {jump_lab.key} -p {jump_lab.port} -W %h:%p {jump_lab.user}@{jump_lab.bastion}")
    vars = jump_lab.target_vars(ansible_ssh_common_args=f"-o ProxyCommand={shlex.quote(ssh)}")
    assert _reach(host_from, "t", vars) == (jump_lab.user, jump_lab.target)


def test_ssh_config_host_alias_with_proxyjump_and_identityfile(jump_lab, host_from, tmp_path):
    """ansible_host is an alias of the -F file; HostName, Port, User, IdentityFile and ProxyJump come from there,
    the bastion's own entry gives its user, port, key and known_hosts."""
    config = _write_config(jump_lab, tmp_path / "ssh_config", (
        "Host gpu-behind\n  HostName {lab.target}\n  Port {lab.port}\n  User {lab.user}\n"
        "  IdentityFile {lab.key}\n  ProxyJump bastion\n  UserKnownHostsFile {lab.known_hosts}\n"
        "Host bastion\n  HostName {lab.bastion}\n  Port {lab.port}\n  User {lab.user}\n  IdentityFile {lab.key}\n"
        "  UserKnownHostsFile {lab.known_hosts}\n"))
    vars = {"ansible_host": "gpu-behind", "ansible_ssh_common_args": f"-F {config}"}
    assert _reach(host_from, "gpu1", vars) == (jump_lab.user, jump_lab.target)


def test_inventory_variables_win_over_the_ssh_config(jump_lab, host_from, tmp_path):
    """As with Ansible (ansible_port/ansible_user go on ssh's command line): the config's wrong Port loses."""
    config = _write_config(jump_lab, tmp_path / "ssh_config", (
        "Host {lab.target}\n  Port 1\n  User nobody\n  ProxyJump {lab.jump}\n"))
    vars = jump_lab.target_vars(ansible_ssh_common_args=f"-F {config}")
    assert _reach(host_from, "t", vars) == (jump_lab.user, jump_lab.target)


def test_a_proxyjump_loop_in_the_ssh_config_is_refused(jump_lab, host_from, tmp_path):
    config = _write_config(jump_lab, tmp_path / "ssh_config", "Host *\n  ProxyJump {lab.jump}\n")
    vars = jump_lab.target_vars(ansible_ssh_common_args=f"-F {config}")
    with pytest.raises(SshOptionError, match="more than 8 jump hosts"):
        open_connection(host_from("t", vars))


def test_unknown_bastion_host_key_is_refused(jump_lab, host_from, tmp_path):
    only_target = tmp_path / "known_hosts"
    only_target.write_text(f"[{jump_lab.target}]:{jump_lab.port} {jump_lab.target_pub}\n")
    before = jump_lab.accepted_logins("bastion")
    vars = jump_lab.target_vars(ansible_ssh_known_hosts_file=str(only_target),
                                ansible_ssh_common_args=f"-o ProxyJump={jump_lab.jump}")
    with pytest.raises(HostUnreachable) as caught:
        open_connection(host_from("t", vars))
    msg = str(caught.value)
    assert "host key of jump host" in msg and jump_lab.bastion in msg and "unknown" in msg
    assert jump_lab.accepted_logins("bastion") == before  # refused before authenticating


def test_changed_target_host_key_is_refused_through_the_bastion(jump_lab, host_from, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = " ".join((tmp_path / "other.pub").read_text().split()[:2])
    known = tmp_path / "known_hosts"
    known.write_text(f"[{jump_lab.bastion}]:{jump_lab.port} {jump_lab.bastion_pub}\n"
                     f"[{jump_lab.target}]:{jump_lab.port} {other}\n")
    before = jump_lab.accepted_logins("target")
    vars = jump_lab.target_vars(ansible_ssh_known_hosts_file=str(known),
                                ansible_ssh_common_args=f"-J {jump_lab.jump}")
    with pytest.raises(HostUnreachable) as caught:
        open_connection(host_from("t", vars))
    msg = str(caught.value)
    assert "CHANGED" in msg and jump_lab.target in msg and "reached through jump host" in msg
    assert jump_lab.accepted_logins("target") == before


def test_bastion_auth_refused_names_the_bastion(jump_lab, host_from):
    vars = jump_lab.target_vars(ansible_ssh_common_args=f"-J root@{jump_lab.bastion}:{jump_lab.port}")
    with pytest.raises(HostUnreachable) as caught:
        open_connection(host_from("t", vars))
    msg = str(caught.value)
    assert "authentication to jump host" in msg and f"root@{jump_lab.bastion}" in msg


def test_bastion_down_names_the_bastion(jump_lab, host_from):
    with socket.socket() as s:  # a port on the bastion's address where no sshd listens
        s.bind(("0.0.0.0", 0))
        dead_port = s.getsockname()[1]
    vars = jump_lab.target_vars(ansible_ssh_common_args=f"-J {jump_lab.user}@{jump_lab.bastion}:{dead_port}",
                                dfp_connect_retries=1)
    with pytest.raises(OSError) as caught:
        open_connection(host_from("t", vars))
    assert f"jump host {jump_lab.user}@{jump_lab.bastion}:{dead_port} of t" in str(caught.value)
    assert "unreachable" in str(caught.value)


def test_bastion_down_in_a_run_is_unreachable_naming_the_bastion(jump_lab, tmp_path):
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        dead_port = s.getsockname()[1]
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"behind": jump_lab.target_vars(
        dfp_connect_retries=1, ansible_ssh_common_args=f"-J {jump_lab.user}@{jump_lab.bastion}:{dead_port}")}}}))
    playbook = tmp_path / "pb.yaml"
    playbook.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                         "tasks": [{"name": "Never", "command": {"argv": ["true"]}}]}]))
    result = run_playbook(playbook, inventory)
    assert result.exit_code == 3
    assert f"jump host {jump_lab.user}@{jump_lab.bastion}:{dead_port} of behind" in result.results[0].msg


def test_target_unreachable_from_the_bastion(jump_lab, host_from):
    vars = jump_lab.target_vars(ansible_port=1, ansible_ssh_common_args=f"-J {jump_lab.jump}")
    with pytest.raises(OSError) as caught:
        open_connection(host_from("t", vars))
    msg = str(caught.value)
    assert "could not open a connection to" in msg and f"{jump_lab.target}:1" in msg and "jump host" in msg


@pytest.mark.parametrize("args, named", [
    ("-o ForwardAgent=yes", "forwardagent"),
    ("-A", "-A"),
    ("-o ProxyJump=x -L 8080:localhost:80", "-L"),
    ("-o ServerAliveInterval=5", "serveraliveinterval"),
])
def test_unsupported_option_is_refused_and_nothing_is_done(jump_lab, host_from, args, named):
    before = jump_lab.accepted_logins("bastion"), jump_lab.accepted_logins("target")
    vars = jump_lab.target_vars(ansible_ssh_common_args=f"-J {jump_lab.jump} {args}")
    with pytest.raises(SshOptionError) as caught:
        open_connection(host_from("gpu7", vars))
    msg = str(caught.value)
    assert "gpu7" in msg and "ansible_ssh_common_args" in msg and named in msg and "\n" not in msg
    assert (jump_lab.accepted_logins("bastion"), jump_lab.accepted_logins("target")) == before


def test_a_playbook_runs_through_the_bastion(jump_lab, tmp_path):
    """The whole engine (worker, file transfer, module) over the jump; the file lands on the target."""
    out = f"/tmp/dfp-jump-{tmp_path.name}"
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"behind": jump_lab.target_vars(
        ansible_ssh_common_args=f"-o ProxyJump={jump_lab.jump}")}}}))
    playbook = tmp_path / "pb.yaml"
    playbook.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Write a file", "copy": {"content": "through the bastion\n", "dest": out}}]}]))
    result = run_playbook(playbook, inventory)
    assert result.exit_code == 0, result.tasks
    assert Path(out).read_text() == "through the bastion\n"  # the namespace shares the file system
    Path(out).unlink()


def test_closing_the_target_closes_the_bastion_connection(jump_lab, host_from):
    conn = open_connection(host_from("t", jump_lab.target_vars(ansible_ssh_common_args=f"-J {jump_lab.jump}")))
    jump = conn._jumps[0]
    assert jump.is_connected and conn.is_connected
    conn.close()
    assert not jump.is_connected


def test_accept_new_on_the_bastion_records_its_key_once(jump_lab, host_from, tmp_path):
    """StrictHostKeyChecking accept-new in the bastion's ssh config entry: its unknown key is added."""
    new_known = tmp_path / "bastion_known"
    config = _write_config(jump_lab, tmp_path / "ssh_config", (
        "Host bastion\n  HostName {lab.bastion}\n  Port {lab.port}\n  User {lab.user}\n"
        "  StrictHostKeyChecking accept-new\n  UserKnownHostsFile " + str(new_known) + "\n"))
    vars = jump_lab.target_vars(ansible_ssh_common_args=f"-F {config} -J bastion")
    assert _reach(host_from, "t", vars) == (jump_lab.user, jump_lab.target)
    assert new_known.read_text() == f"[{jump_lab.bastion}]:{jump_lab.port} {jump_lab.bastion_pub}\n"
    assert _reach(host_from, "t", vars) == (jump_lab.user, jump_lab.target)
    assert len(new_known.read_text().splitlines()) == 1


def test_a_failing_proxycommand_says_what_it_printed(jump_lab, host_from, tmp_path):
    empty = tmp_path / "empty_known"
    empty.write_text("")
    ssh = (f"ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile={empty} "
           f"-i {jump_lab.key} -p {jump_lab.port} -W %h:%p {jump_lab.user}@{jump_lab.bastion}")
    vars = jump_lab.target_vars(ansible_ssh_common_args=f"-o ProxyCommand={shlex.quote(ssh)}")
    with pytest.raises(OSError) as caught:
        open_connection(host_from("t", vars))
    msg = str(caught.value)
    assert "ProxyCommand" in msg and "Host key verification failed" in msg and "exit status 255" in msg
