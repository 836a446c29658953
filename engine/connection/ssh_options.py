"""How one host is reached over SSH, as Ansible and OpenSSH would decide it: the route and every hop's settings.

Sources, in OpenSSH's order (for each setting the first value obtained wins; IdentityFile accumulates):
  1. `ansible_ssh_args`
  2. the inventory's own variables, as Ansible passes them to ssh: `ansible_host_key_checking: false`
     (StrictHostKeyChecking=no), `ansible_port`, `ansible_ssh_private_key_file`, `ansible_user`,
     `ansible_ssh_timeout`/`ansible_timeout`, and this tool's `ansible_ssh_known_hosts_file`
  3. `ansible_ssh_common_args`, then `ansible_ssh_extra_args`
  4. the ssh config file: `-F FILE` if given (`-F none`: no file), else ~/.ssh/config then /etc/ssh/ssh_config
  5. defaults: port 22, known_hosts ~/.ssh/known_hosts + /etc/ssh/ssh_known_hosts, host keys checked, and,
     unless `ansible_ssh_args` is set (as Ansible, whose ssh_args replace its defaults), the connection kept
     60 s idle (Ansible's default ssh_args `-o ControlMaster=auto -o ControlPersist=60s`; its `-C` is left out:
     compression costs both ends CPU on the links GPU fleets use). A ControlMaster or ControlPersist given
     anywhere above wins over that default, so `-o ControlPersist=no` in ansible_ssh_common_args turns it off.
The ssh config is looked up under `ansible_host` (or the inventory name), so that may be a Host alias there.

A jump host (ProxyJump / -J `[user@]host[:port]`, comma-separated for a chain) gets, as with OpenSSH, only the
user and port of its spec plus its own ssh config entry; where that entry names no IdentityFile /
UserKnownHostsFile, the target's keys / known_hosts files are used. Its host key is checked unless its own ssh
config entry says StrictHostKeyChecking no.
"""

from __future__ import annotations

import functools
import io
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Union

from engine.errors import HostUnreachable
from engine.inventory.manager import Host

ARG_VARIABLES = ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args")
# -o options this tool honours (lower case, as ssh reads them).
SUPPORTED_OPTIONS = ("proxyjump", "proxycommand", "port", "user", "identityfile", "stricthostkeychecking",
                     "userknownhostsfile", "connecttimeout", "controlmaster", "controlpersist")
# Where ssh keeps its control socket: this tool keeps its own (engine/connection/persist.py), so it is accepted, no effect.
NO_EFFECT_OPTIONS = ("controlpath",)
DEFAULT_KEEP = {"controlmaster": "auto", "controlpersist": "60s"}  # where the user says neither (docstring, 5.)
MASTER_WORDS = ("yes", "auto", "ask", "autoask")  # ControlMaster values that share a connection (ssh_config(5))
_DURATION = re.compile(r"^(?:\d+[sSmMhHdDwW]?)+$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
FLAG_OPTIONS = {"-J": "proxyjump", "-p": "port", "-l": "user", "-i": "identityfile", "-F": "configfile"}
CHECKING_WORDS = {"yes": "yes", "ask": "yes", "true": "yes", "no": "no", "off": "no", "false": "no",
                  "accept-new": "accept-new"}
DEFAULT_CONFIG_FILES = ("~/.ssh/config", "/etc/ssh/ssh_config")
MAX_HOPS = 8
_SAFE_TOKEN = re.compile(r"^[A-Za-z0-9._:@\[\]%+-]*$")  # what %h/%r may expand to inside a shell command


class SshOptionError(HostUnreachable):
    """A host's SSH settings cannot be honoured; nothing was sent to it (the message names host, variable, fix)."""


@dataclass
class ProxyCommandSpec:
    command: str  # tokens already expanded
    cwd: str | None = None  # where it runs (the run's folder; a kept-connection daemon runs elsewhere)


@dataclass
class Hop:
    """One SSH server on the way: where it is, who logs in, which keys, how its host key is checked."""

    label: str  # for messages: "h1" or "jump host bastion (of h1)"
    hostname: str
    port: int
    user: str | None
    identity_files: list[str]
    explicit_keys: list[str]  # given by the inventory or -i: must exist
    known_hosts: list[str]
    checking: str  # yes | no | accept-new
    timeout: float
    via: Union[Hop, ProxyCommandSpec, None] = None
    password: str | None = None
    compress: bool = False
    persist_s: float | None = None  # ControlPersist: keep the connection and its worker this long idle; 0 = no end
    persist_default: bool = False  # kept by the tool's default, not by the user's words: where it cannot, direct

    @property
    def where(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.hostname}:{self.port}"

    @property
    def known_name(self) -> str:
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


# -- the command-line part: ansible_ssh_args, inventory variables, common/extra args -----------------------------

@dataclass
class _CommandLine:
    """Options in ssh's command-line order; the first value of each wins (IdentityFile accumulates)."""

    values: dict[str, str] = field(default_factory=dict)
    identity_files: list[str] = field(default_factory=list)
    config_file: str | None = None
    compress: bool = False

    def set(self, key: str, value: str) -> None:
        if key == "identityfile":
            if value not in self.identity_files:
                self.identity_files.append(value)
        elif key == "configfile":
            self.config_file = value  # as ssh: the last -F wins
        elif key in ("proxyjump", "proxycommand") and ("proxyjump" in self.values or "proxycommand" in self.values):
            return  # one proxy: ssh keeps the first of the two it reads
        elif key not in self.values:
            self.values[key] = value


def _refuse(host: Host, variable: str, what: str, fix: str) -> SshOptionError:
    supported = ", ".join(["-o " + o for o in ("ProxyJump", "ProxyCommand", "Port", "User", "IdentityFile",
                                                   "StrictHostKeyChecking", "UserKnownHostsFile", "ConnectTimeout",
                                                   "ControlMaster", "ControlPersist")]
                          + ["-J", "-p", "-l", "-i", "-F", "-C"])
    return SshOptionError(
        f"host {host.name}: {variable} {what}; nothing was sent to the host. {fix} Supported: {supported} "
        f"(ControlPath is accepted and has no effect)."
    )


def _split_option(host: Host, variable: str, text: str) -> tuple[str, str]:
    match = re.match(r"^\s*([A-Za-z]+)\s*(?:=\s*|\s+)(.*)$", text, re.S)
    if not match:
        raise _refuse(host, variable, f"has '-o {text}', which is not Key=Value",
                      "Write options as -o Key=Value.")
    return match.group(1).lower(), match.group(2).strip()


def _parse_args(host: Host, variable: str, text: Any, into: _CommandLine) -> None:
    """Add one variable's ssh arguments to `into`; any option this tool does not honour is refused."""
    if not isinstance(text, str):
        raise _refuse(host, variable, f"is a {type(text).__name__}, not a string of ssh arguments",
                      "Give it as one string, e.g. '-o ProxyJump=user@bastion'.")
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise _refuse(host, variable, f"cannot be split like a shell line ({exc})", "Check its quotes.") from None
    i = 0
    while i < len(tokens):
        word = tokens[i]
        flag, rest = word[:2], word[2:]
        if word == "-C":
            into.compress = True
        elif flag == "-o" or flag in FLAG_OPTIONS:
            if not rest:
                i += 1
                if i >= len(tokens):
                    raise _refuse(host, variable, f"ends with '{flag}' and no value", f"Give {flag} a value.")
                rest = tokens[i]
            key, value = _split_option(host, variable, rest) if flag == "-o" else (FLAG_OPTIONS[flag], rest)
            _accept_option(host, variable, key, value, into)
        else:
            raise _refuse(host, variable, f"has '{word}', which this tool does not honour",
                          "Remove it, or use an option listed here.")
        i += 1


def _accept_option(host: Host, variable: str, key: str, value: str, into: _CommandLine) -> None:
    if key in NO_EFFECT_OPTIONS:
        return
    if key not in SUPPORTED_OPTIONS and key != "configfile":
        raise _refuse(host, variable, f"has the ssh option '{key}', which this tool does not honour",
                      "Remove it, or set it in an ssh config entry (-F) if ssh itself needs it elsewhere.")
    if "\n" in value or "\r" in value or not value:
        raise _refuse(host, variable, f"gives '{key}' an empty or multi-line value", "Give a one-line value.")
    into.set(key, value)


def _inventory_options(host: Host, into: _CommandLine) -> None:
    """What Ansible's ssh plugin puts between ansible_ssh_args and ansible_ssh_common_args."""
    v = host.vars
    checking = v.get("ansible_host_key_checking", True)
    if isinstance(checking, str):
        checking = checking.strip().lower() not in ("false", "no", "0", "off")
    if not checking:
        into.set("stricthostkeychecking", "no")
    if v.get("ansible_port") is not None:
        into.set("port", str(v["ansible_port"]))
    key = v.get("ansible_ssh_private_key_file", v.get("ansible_private_key_file"))
    if key:
        into.set("identityfile", str(key))
    if v.get("ansible_user") is not None:
        into.set("user", str(v["ansible_user"]))
    timeout = v.get("ansible_ssh_timeout", v.get("ansible_timeout"))
    if timeout is not None:
        into.set("connecttimeout", str(timeout))
    if v.get("ansible_ssh_known_hosts_file"):
        into.set("userknownhostsfile", str(v["ansible_ssh_known_hosts_file"]))


def command_line(host: Host) -> _CommandLine:
    """The host's ssh options in the order ssh would read them from Ansible's command line."""
    cmd = _CommandLine()
    if host.vars.get("ansible_ssh_args") is not None:
        _parse_args(host, "ansible_ssh_args", host.vars["ansible_ssh_args"], cmd)
    _inventory_options(host, cmd)
    for variable in ARG_VARIABLES[1:]:
        if host.vars.get(variable) is not None:
            _parse_args(host, variable, host.vars[variable], cmd)
    return cmd


# -- the ssh config file ----------------------------------------------------------------------------------------

_FILE_CACHE: dict[str, tuple[tuple[int, int], str]] = {}


def _config_text(path: str) -> str:
    """A config file's text, read again only when it changes (every connection looks it up)."""
    st = os.stat(path)
    stamp = (st.st_mtime_ns, st.st_size)
    cached = _FILE_CACHE.get(path)
    if cached and cached[0] == stamp:
        return cached[1]
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    _FILE_CACHE[path] = (stamp, text)
    return text


def config_files(host: Host, given: str | None) -> list[str]:
    if given is None:
        return [p for p in (os.path.expanduser(f) for f in DEFAULT_CONFIG_FILES) if os.path.isfile(p)]
    if given.lower() == "none":
        return []
    path = os.path.expanduser(given)
    if not os.path.isfile(path):
        raise SshOptionError(f"host {host.name}: the ssh config file {given} given with -F does not exist; "
                             "nothing was sent to the host. Fix the path in ansible_ssh_common_args.")
    return [path]


def _quote_config_value(value: str) -> str:
    return f'"{value}"' if " " in value and not value.startswith('"') else value


def lookup(host: Host, name: str, first: dict[str, str], identity_files: list[str], files: list[str]) -> dict:
    """paramiko's reading of the ssh config for `name`, with `first` ahead of every file (OpenSSH's order).

    The given values go in as a leading `Host *` block, so %h/%p/%r in a ProxyCommand expand with the final
    port and user, as OpenSSH does.
    """
    lines = ["Host *"] + [f"  {k} {v}" for k, v in first.items()]
    lines += [f"  IdentityFile {_quote_config_value(p)}" for p in identity_files]
    text = "\n".join(lines) + "\n" + "\n".join(_config_text(p) for p in files)
    try:
        return dict(_looked_up(name, text, "proxycommand" not in first))
    except Exception as exc:  # paramiko's parser raises several types for a bad line
        raise SshOptionError(f"host {host.name}: cannot read the ssh config ({', '.join(files) or 'none'}) for "
                             f"{name}: {exc}; nothing was sent to the host. Fix that file.") from None


@functools.lru_cache(maxsize=4096)
def _looked_up(name: str, text: str, keep: bool) -> dict:
    """paramiko's lookup of `name` in the config `text`: the checks before the run and the connection ask the
    same question, and the answer depends on nothing else (callers copy it). Kept on disk between runs
    (engine/connection/ssh_lookup_cache.py), so that a run whose hosts are all reached through kept connections never
    imports paramiko (about 60 ms of its start). `keep` is False when the run's own options give a ProxyCommand:
    its line may carry a vault-encrypted token, which must not land decrypted in a cache file."""
    from engine.connection import ssh_lookup_cache
    key = ssh_lookup_cache.key_of(name, text) if keep else None
    found = ssh_lookup_cache.get(key)
    if found is not None:
        return found
    import paramiko

    config = paramiko.SSHConfig()
    config.parse(io.StringIO(text))
    result = dict(config.lookup(name))
    ssh_lookup_cache.put(key, result)
    return result


# -- the route ---------------------------------------------------------------------------------------------------

def _int_value(host: Host, key: str, value: Any, where: str, low: float, high: float) -> float:
    try:
        number = float(value) if key == "connecttimeout" else int(str(value))
    except (TypeError, ValueError):
        number = None
    if number is None or not low <= number <= high:
        raise SshOptionError(f"host {host.name}: {key} '{value}' ({where}) is not a number from {low:g} to "
                             f"{high:g}; nothing was sent to the host. Fix it.")
    return number


def _known_hosts(value: str | None) -> list[str]:
    if value is None:
        return [p for p in (os.path.expanduser("~/.ssh/known_hosts"), "/etc/ssh/ssh_known_hosts") if os.path.exists(p)]
    if value.strip().lower() == "none":
        return []
    return [os.path.expanduser(p) for p in shlex.split(value)]


def _checking(host: Host, value: str | None, where: str) -> str:
    if value is None:
        return "yes"
    word = CHECKING_WORDS.get(value.strip().lower())
    if word is None:
        raise SshOptionError(f"host {host.name}: StrictHostKeyChecking '{value}' ({where}) is not one of yes, no, "
                             "accept-new, ask; nothing was sent to the host. Fix it.")
    return word


def _proxy(host: Host, options: dict, cmd_values: dict, files: list[str], depth: int, fallback: Hop) -> Any:
    """The hop's ProxyJump chain or ProxyCommand (the command line's choice first, then the config's)."""
    if "proxycommand" in cmd_values or ("proxyjump" not in cmd_values and "proxyjump" not in options):
        command = options.get("proxycommand")
        if command and command.strip().lower() != "none":
            return ProxyCommandSpec(command)
        return None
    spec = options.get("proxyjump")
    if not spec or spec.strip().lower() == "none":
        return None
    via = None
    for part in spec.split(","):
        via = _jump_hop(host, part.strip(), files, depth + 1, fallback, via)
    return via


_JUMP = re.compile(r"^(?:ssh://)?(?:(?P<user>[^@/\s:]+)@)?(?:\[(?P<v6>[0-9A-Fa-f:.%]+)\]|(?P<host>[A-Za-z0-9._%-]+))"
                   r"(?::(?P<port>\d+))?/?$")


def _jump_hop(host: Host, spec: str, files: list[str], depth: int, target: Hop, previous: Hop | None) -> Hop:
    """One jump host from `[user@]host[:port]`, completed by its own ssh config entry."""
    match = _JUMP.match(spec)
    if not match:
        raise SshOptionError(f"host {host.name}: jump host '{spec}' is not [user@]host[:port]; nothing was sent "
                             "to the host. Fix the ProxyJump / -J value.")
    if depth > MAX_HOPS:
        raise SshOptionError(f"host {host.name}: more than {MAX_HOPS} jump hosts (a ProxyJump loop in the ssh "
                             "config?); nothing was sent to the host. Fix the ProxyJump entries.")
    name = match.group("host") or match.group("v6")
    first = {k: v for k, v in (("User", match.group("user")), ("Port", match.group("port"))) if v}
    if previous is not None:  # a later hop of a chain is reached through the one before it
        first["ProxyJump"] = "none"
    options = lookup(host, name, first, [], files)
    label = f"jump host {spec} of {host.name}"
    hop = Hop(
        label=label,
        hostname=str(options.get("hostname", name)),
        port=int(_int_value(host, "port", options.get("port", 22), f"jump host {spec}", 1, 65535)),
        user=options.get("user"),
        identity_files=[os.path.expanduser(p) for p in options.get("identityfile", [])] or target.identity_files,
        explicit_keys=[],
        known_hosts=_known_hosts(options["userknownhostsfile"]) if "userknownhostsfile" in options else target.known_hosts,
        checking=_checking(host, options.get("stricthostkeychecking"), f"ssh config of jump host {spec}"),
        timeout=target.timeout,
    )
    hop.via = previous if previous is not None else _proxy(host, options, {}, files, depth, target)
    _check_tokens(host, hop)
    return hop


def resolve(host: Host) -> Hop:
    """The target hop of `host` with the chain of hops before it; bad settings raise SshOptionError."""
    cmd = command_line(host)
    files = config_files(host, cmd.config_file)
    first = {key: value for key, value in cmd.values.items()}
    options = lookup(host, host.address, first, cmd.identity_files, files)
    port = int(_int_value(host, "port", options.get("port", 22), "ansible_port or ssh options", 1, 65535))
    timeout = _int_value(host, "connecttimeout", options.get("connecttimeout", 10), "ansible_timeout or ssh options",
                         0.1, 3600)
    explicit = [os.path.expanduser(p) for p in cmd.identity_files]
    for path in explicit:
        if not os.path.isfile(path):
            raise SshOptionError(f"host {host.name}: the private key {path} (ansible_ssh_private_key_file or -i) "
                                 "does not exist; nothing was sent to the host. Fix the path.")
    from_config = [os.path.expanduser(p) for p in options.get("identityfile", [])]
    target = Hop(
        label=host.name,
        hostname=options.get("hostname", host.address),
        port=port,
        user=options.get("user"),
        identity_files=explicit + [p for p in from_config if p not in explicit and os.path.isfile(p)],
        explicit_keys=explicit,
        known_hosts=_known_hosts(options.get("userknownhostsfile")),
        checking=_checking(host, options.get("stricthostkeychecking"), "inventory, ssh options or ssh config"),
        timeout=timeout,
        password=str(host.vars["ansible_password"]) if host.vars.get("ansible_password") else None,
        compress=cmd.compress,
        persist_s=_persist(host, _with_default_keep(host, options)),
    )
    target.persist_default = target.persist_s is not None and _keeps_by_default(host, options)
    target.via = _proxy(host, options, cmd.values, files, 0, target)
    if target.persist_default and _through_proxy_command(target):
        # The daemon would run the ProxyCommand without the run's terminal and environment (a bastion's prompt,
        # AWS_PROFILE, an activated venv's PATH): kept only when the user asks for it.
        target.persist_s, target.persist_default = None, False
    _check_tokens(host, target)
    return target


def _default_keep_applies(host: Host) -> bool:
    """Ansible's default ssh_args apply: none set (set ones replace them), on the ssh connection (its paramiko
    connection takes no ssh_args)."""
    return host.vars.get("ansible_ssh_args") is None and host.connection in ("ssh", "smart")


def _keeps_by_default(host: Host, options: dict) -> bool:
    """The keep time is the default's, not the user's: where keeping cannot be had, the run goes direct."""
    return _default_keep_applies(host) and "controlpersist" not in options


def _with_default_keep(host: Host, options: dict) -> dict:
    """The options with the default keeping filled in where the user gave no ssh_args and no such option."""
    return {**DEFAULT_KEEP, **options} if _default_keep_applies(host) else options


def _through_proxy_command(hop: Hop) -> bool:
    while hop.via is not None:
        if isinstance(hop.via, ProxyCommandSpec):
            return True
        hop = hop.via
    return False


def _persist(host: Host, options: dict) -> float | None:
    """ControlPersist with ControlMaster on (as ssh, which keeps a master only when ControlMaster shares one):
    seconds idle before the kept connection closes, 0 for no end (`yes` or 0); None when nothing is kept."""
    value = str(options.get("controlpersist", "no")).strip().lower()
    if str(options.get("controlmaster", "no")).strip().lower() not in MASTER_WORDS or value in ("no", "false"):
        return None
    if value in ("yes", "true", "0"):
        return 0.0
    if not _DURATION.match(value):
        raise SshOptionError(f"host {host.name}: ControlPersist '{value}' is not yes, no or a time such as 60, "
                             "60s, 10m or 1h30m; nothing was sent to the host. Fix the ssh option (ansible_ssh_args "
                             "or the ssh config).")
    return float(sum(int(n) * _UNIT_S[u.lower()] for n, u in re.findall(r"(\d+)([a-zA-Z]?)", value)))


def _check_tokens(host: Host, hop: Hop) -> None:
    """%h/%r reach a shell in the ProxyCommand: only plain host and user names may."""
    if not isinstance(hop.via, ProxyCommandSpec):
        return
    for what, value in (("address", hop.hostname), ("user", hop.user or "")):
        if not _SAFE_TOKEN.match(value):
            raise SshOptionError(f"host {host.name}: its {what} '{value}' would be pasted into a ProxyCommand "
                                 "shell line and has characters a host or user name does not; nothing was sent "
                                 "to the host. Fix ansible_host / ansible_user.")
