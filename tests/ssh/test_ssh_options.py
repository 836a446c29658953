"""Which ssh setting wins, as Ansible + OpenSSH decide it, and which inputs are refused (no network needed)."""

from __future__ import annotations

import json

import pytest

from engine.connection.connect import check_ssh_settings
from engine.connection.ssh_options import Hop, ProxyCommandSpec, SshOptionError, resolve
from engine.errors import UserError
from engine.inventory.manager import Host


@pytest.fixture
def keys(tmp_path):
    paths = []
    for name in ("inv_key", "dash_i_key", "config_key", "jump_key"):
        (tmp_path / name).write_text("not read here\n")
        paths.append(str(tmp_path / name))
    return paths


@pytest.fixture
def no_home_config(tmp_path, monkeypatch):
    """A HOME of the test's own, so root's real ~/.ssh/config is never read."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    return home


def _host(**vars) -> Host:
    return Host("gpu1", dict({"ansible_host": "10.0.0.5"}, **vars), ["all"])


def _config(tmp_path, text: str) -> str:
    path = tmp_path / "ssh_config"
    path.write_text(text)
    return f"-F {path}"


def test_ansible_order_ssh_args_then_inventory_then_common_then_extra_then_config(tmp_path, no_home_config):
    cfg = _config(tmp_path, "Host 10.0.0.5\n  Port 4000\n  User cfguser\n  ConnectTimeout 40\n")
    hop = resolve(_host(ansible_ssh_args="-o ConnectTimeout=7", ansible_port=2000,
                        ansible_ssh_common_args=f"{cfg} -o Port=3000 -o User=common -o ConnectTimeout=30",
                        ansible_ssh_extra_args="-l extra -p 5000"))
    assert (hop.port, hop.user, hop.timeout) == (2000, "common", 7.0)
    hop = resolve(_host(ansible_ssh_common_args=cfg, ansible_ssh_extra_args="-p 5000"))
    assert (hop.port, hop.user, hop.timeout) == (5000, "cfguser", 40.0)
    assert resolve(_host(ansible_ssh_common_args=cfg)).port == 4000


def test_identity_files_accumulate_in_order_and_missing_config_ones_are_skipped(tmp_path, keys, no_home_config):
    inv, dash_i, from_config, _ = keys
    cfg = _config(tmp_path, f"Host *\n  IdentityFile {from_config}\n  IdentityFile {tmp_path}/absent\n")
    hop = resolve(_host(ansible_ssh_private_key_file=inv, ansible_ssh_common_args=f"{cfg} -i {dash_i}"))
    assert hop.identity_files == [inv, dash_i, from_config]


def test_a_missing_given_key_is_refused(tmp_path, no_home_config):
    with pytest.raises(SshOptionError, match="private key .*absent.* does not exist"):
        resolve(_host(ansible_ssh_private_key_file=str(tmp_path / "absent")))


def test_home_ssh_config_is_read_unless_dash_f_none(no_home_config):
    (no_home_config / ".ssh" / "config").write_text("Host gpu-alias\n  HostName 10.9.9.9\n  Port 2222\n")
    hop = resolve(Host("gpu1", {"ansible_host": "gpu-alias"}, ["all"]))
    assert (hop.hostname, hop.port) == ("10.9.9.9", 2222)
    hop = resolve(Host("gpu1", {"ansible_host": "gpu-alias", "ansible_ssh_common_args": "-F none"}, ["all"]))
    assert (hop.hostname, hop.port) == ("gpu-alias", 22)


def test_ansibles_default_ssh_args_are_accepted_and_keep_the_connection(no_home_config):
    hop = resolve(_host(ansible_ssh_args="-C -o ControlMaster=auto -o ControlPersist=60s -o ControlPath=/x/%C"))
    assert hop.compress and hop.via is None and hop.persist_s == 60


@pytest.mark.parametrize("master, persist, seconds", [
    ("auto", "10m", 600), ("yes", "1h30m", 5400), ("autoask", "90", 90), ("auto", "yes", 0), ("auto", "0", 0),
    ("auto", "no", None), ("no", "60s", None), (None, "60s", None), ("auto", None, None)])
def test_control_persist_keeps_only_with_a_sharing_control_master(no_home_config, master, persist, seconds):
    # With ansible_ssh_args set (here to nothing) the tool adds no default: OpenSSH's own rules.
    args = " ".join(f"-o {k}={v}" for k, v in (("ControlMaster", master), ("ControlPersist", persist)) if v)
    hop = resolve(_host(ansible_ssh_args="", ansible_ssh_common_args=args))
    assert hop.persist_s == seconds and not hop.persist_default


@pytest.mark.parametrize("given, seconds, by_default", [
    ({}, 60, True),
    ({"ansible_ssh_common_args": "-o ControlPersist=no"}, None, False),
    ({"ansible_ssh_common_args": "-o ControlMaster=no"}, None, False),
    ({"ansible_ssh_extra_args": "-o ControlPersist=10m"}, 600, False),  # ControlMaster from the default
    ({"ansible_ssh_common_args": "-o ControlMaster=auto"}, 60, True),  # the keep time is still the default's
    ({"ansible_ssh_args": ""}, None, False),  # as Ansible: ssh_args replace the defaults
    ({"ansible_ssh_args": "-o ControlMaster=auto -o ControlPersist=30"}, 30, False),
])
def test_connections_are_kept_60_s_by_default_unless_the_user_says_otherwise(no_home_config, given, seconds,
                                                                             by_default):
    hop = resolve(_host(**given))
    assert (hop.persist_s, hop.persist_default) == (seconds, by_default)


def test_a_proxycommand_route_is_kept_only_when_the_user_asks(no_home_config):
    # The daemon would run the ProxyCommand without the run's terminal and environment.
    proxy = "-o ProxyCommand='nc %h %p'"
    assert resolve(_host(ansible_ssh_common_args=proxy)).persist_s is None
    assert resolve(_host(ansible_ssh_common_args=proxy + " -o ControlPersist=30")).persist_s == 30


def test_the_paramiko_connection_gets_no_default_keeping(no_home_config):
    assert resolve(_host(ansible_connection="paramiko")).persist_s is None  # Ansible's takes no ssh_args


def test_a_control_master_no_in_the_ssh_config_turns_the_default_off(tmp_path, no_home_config):
    (no_home_config / ".ssh" / "config").write_text("Host 10.0.0.5\n  ControlMaster no\n")
    assert resolve(_host()).persist_s is None


def test_control_persist_from_the_ssh_config(tmp_path, no_home_config):
    cfg = _config(tmp_path, "Host 10.0.0.5\n  ControlMaster auto\n  ControlPersist 5m\n")
    assert resolve(_host(ansible_ssh_common_args=cfg)).persist_s == 300


def test_a_bad_control_persist_is_refused_naming_the_fix(no_home_config):
    with pytest.raises(SshOptionError, match="ControlPersist '5 minutes' is not yes, no or a time"):
        resolve(_host(ansible_ssh_common_args="-o ControlMaster=auto -o 'ControlPersist=5 minutes'"))


def test_host_key_checking(tmp_path, no_home_config):
    assert resolve(_host()).checking == "yes"
    assert resolve(_host(ansible_ssh_common_args="-o StrictHostKeyChecking=no")).checking == "no"
    assert resolve(_host(ansible_ssh_common_args="-o StrictHostKeyChecking=accept-new")).checking == "accept-new"
    # Ansible puts StrictHostKeyChecking=no ahead of the common args: the inventory's false wins
    assert resolve(_host(ansible_host_key_checking=False,
                         ansible_ssh_common_args="-o StrictHostKeyChecking=yes")).checking == "no"
    known = resolve(_host(ansible_ssh_common_args=f"-o UserKnownHostsFile='{tmp_path}/a {tmp_path}/b'"))
    assert known.known_hosts == [f"{tmp_path}/a", f"{tmp_path}/b"]
    with pytest.raises(SshOptionError, match="StrictHostKeyChecking 'maybe'"):
        resolve(_host(ansible_ssh_common_args="-o StrictHostKeyChecking=maybe"))


def test_proxycommand_tokens_expand_with_the_final_port_and_user(tmp_path, no_home_config):
    cfg = _config(tmp_path, "Host 10.0.0.5\n  Port 22\n  ProxyCommand nc -X connect %h %p %r\n")
    hop = resolve(_host(ansible_port=2200, ansible_user="ops", ansible_ssh_common_args=cfg))
    assert isinstance(hop.via, ProxyCommandSpec) and hop.via.command == "nc -X connect 10.0.0.5 2200 ops"
    hop = resolve(_host(ansible_ssh_common_args='-o ProxyCommand="ssh -W %h:%p bastion"'))
    assert hop.via.command == "ssh -W 10.0.0.5:22 bastion"


def test_a_host_name_that_would_inject_into_the_proxycommand_is_refused(no_home_config):
    with pytest.raises(SshOptionError, match="ProxyCommand"):
        resolve(_host(ansible_host="x;touch /tmp/pwned", ansible_ssh_common_args="-o ProxyCommand='nc %h %p'"))


def test_jump_specs_and_what_a_jump_host_inherits(tmp_path, keys, no_home_config):
    inv, _, _, jump_key = keys
    cfg = _config(tmp_path, f"Host b2\n  HostName 10.1.1.2\n  IdentityFile {jump_key}\n"
                            f"  UserKnownHostsFile {tmp_path}/jump_known\n")
    hop = resolve(_host(ansible_ssh_private_key_file=inv, ansible_ssh_known_hosts_file=f"{tmp_path}/known",
                        ansible_host_key_checking=False,
                        ansible_ssh_common_args=f"{cfg} -J ssh://ops@b1:2201,b2"))
    second = hop.via
    assert isinstance(second, Hop) and (second.hostname, second.port, second.user) == ("10.1.1.2", 22, None)
    assert second.identity_files == [jump_key] and second.known_hosts == [f"{tmp_path}/jump_known"]
    first = second.via
    assert (first.hostname, first.port, first.user) == ("b1", 2201, "ops")
    assert first.identity_files == [inv] and first.known_hosts == [f"{tmp_path}/known"]
    assert first.checking == "yes" and second.checking == "yes"  # the target's 'false' is not the bastion's
    assert hop.checking == "no" and first.via is None
    v6 = resolve(_host(ansible_ssh_common_args="-J [fd00::1]:2022")).via
    assert (v6.hostname, v6.port) == ("fd00::1", 2022)


def test_the_first_of_proxyjump_and_proxycommand_wins(no_home_config):
    hop = resolve(_host(ansible_ssh_common_args="-o ProxyCommand='nc %h %p' -J bastion"))
    assert isinstance(hop.via, ProxyCommandSpec)
    hop = resolve(_host(ansible_ssh_common_args="-J bastion -o ProxyCommand='nc %h %p'"))
    assert isinstance(hop.via, Hop)
    assert resolve(_host(ansible_ssh_common_args="-o ProxyJump=none")).via is None


@pytest.mark.parametrize("vars, words", [
    ({"ansible_ssh_common_args": ["-J", "x"]}, ["ansible_ssh_common_args", "list"]),
    ({"ansible_ssh_extra_args": "-o 'ProxyJump=x"}, ["ansible_ssh_extra_args", "quotes"]),
    ({"ansible_ssh_args": "-o"}, ["ansible_ssh_args", "no value"]),
    ({"ansible_ssh_common_args": "-J 'bad spec!'"}, ["jump host", "[user@]host[:port]"]),
    ({"ansible_ssh_common_args": "-F /nonexistent/ssh_config"}, ["/nonexistent/ssh_config", "does not exist"]),
    ({"ansible_ssh_common_args": "bastion"}, ["'bastion'", "does not honour"]),
    ({"ansible_ssh_common_args": "-o Port=99999"}, ["port '99999'"]),
    ({"ansible_ssh_common_args": "-o RemoteCommand=id"}, ["remotecommand", "does not honour"]),
])
def test_bad_ssh_settings_are_refused_in_one_paragraph(vars, words, no_home_config):
    with pytest.raises(SshOptionError) as caught:
        resolve(_host(**vars))
    msg = str(caught.value)
    assert "gpu1" in msg and "\n" not in msg and all(w in msg for w in words), msg


def test_check_ssh_settings_is_a_user_error_and_skips_local_hosts(no_home_config):
    with pytest.raises(UserError, match="forwardagent"):
        check_ssh_settings(_host(ansible_ssh_common_args="-o ForwardAgent=yes"))
    check_ssh_settings(_host(ansible_connection="local", ansible_ssh_common_args="-o ForwardAgent=yes"))


def test_a_bad_ssh_option_on_one_host_stops_the_run_before_any_host_is_touched(tmp_path, no_home_config):
    """Preflight: the whole run exits 4 naming the host and option; the other (local) host is not run either."""
    from engine.api import EXIT_BAD_INPUT, run_playbook

    marker = tmp_path / "touched"
    playbook = tmp_path / "pb.yaml"
    playbook.write_text(f"- hosts: all\n  gather_facts: false\n  tasks:\n    - command: {{argv: [touch, {marker}]}}\n")
    inventory = {"all": {"hosts": {
        "here": {"ansible_connection": "local"},
        "gpu1": {"ansible_host": "10.0.0.5", "ansible_ssh_common_args": "-o ForwardAgent=yes"}}}}
    result = run_playbook(playbook, inventory)
    assert result.exit_code == EXIT_BAD_INPUT
    assert "host gpu1" in result.error and "forwardagent" in result.error.lower()
    assert not marker.exists()


@pytest.fixture
def lookups(tmp_path, monkeypatch):
    """The ssh-config lookup cache in a folder of the test's own, empty, with no answer remembered in memory."""
    from engine.connection import ssh_lookup_cache, ssh_options

    monkeypatch.setattr(ssh_lookup_cache, "FOLDER", tmp_path / "lookups")
    ssh_lookup_cache._new.clear()
    ssh_options._looked_up.cache_clear()
    yield tmp_path / "lookups"
    ssh_lookup_cache._new.clear()
    ssh_options._looked_up.cache_clear()


def test_lookups_are_kept_private_and_read_by_the_next_run(no_home_config, lookups):
    from engine.connection import ssh_lookup_cache, ssh_options

    assert resolve(_host(ansible_port=2200)).port == 2200
    ssh_lookup_cache.flush()
    [kept] = list(lookups.iterdir())
    assert oct(kept.stat().st_mode & 0o777) == "0o600"
    answer = json.loads(kept.read_text())
    answer["port"] = "2299"  # the next run reads the file, not the config
    kept.write_text(json.dumps(answer))
    ssh_options._looked_up.cache_clear()
    assert resolve(_host(ansible_port=2200)).port == 2299


def test_lookups_with_match_or_the_hosts_own_proxycommand_are_not_kept(tmp_path, no_home_config, lookups):
    from engine.connection import ssh_lookup_cache
    cfg = _config(tmp_path, "Match host 10.0.0.5\n  Port 2201\n")
    assert resolve(_host(ansible_ssh_common_args=cfg)).port == 2201
    resolve(_host(ansible_ssh_common_args="-o ProxyCommand='nc -X connect -x proxy:3128 secret-token %h %p'"))
    ssh_lookup_cache.flush()
    assert not lookups.exists() or not list(lookups.iterdir())
