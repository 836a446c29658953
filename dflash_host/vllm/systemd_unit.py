"""The vLLM server's systemd unit: its text, and whether the server runs under one (the mode).

Pure text: no file is written here (vllm.render writes what these return). Every value placed in the
unit is one line (vllm.values.line_problem) with systemd's specifiers and variables escaped.
Standard library only.
"""

from __future__ import annotations

from dflash_host.module import ModuleError
from dflash_host.vllm.values import line_problem

# The unit's name when the task gives none (vllm_service_name, roles/common/defaults.yaml, names it in a play).
SERVICE_NAME = "dflash-vllm"


def _unit_quote(arg: str) -> str:
    """One ExecStart word: double-quoted, with systemd's specifiers (%) and variables ($) escaped."""
    text = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{text}"'


def _unit_setting(setting: str, value: str) -> str:
    """A value for `Setting=value` outside ExecStart: systemd resolves % specifiers there (so % is written
    %%), strips surrounding blanks, and joins a line ending in a backslash to the next one."""
    problem = line_problem(value)
    if problem is None and value != value.strip():
        problem = "starts or ends with a blank, which systemd strips"
    if problem is None and value.endswith("\\"):
        problem = "ends with a backslash, which systemd reads as a line continuation"
    if problem:
        raise ModuleError(f"the unit's {setting}= value {problem}; fix the variable that sets it (vllm_pidfile for the folders)")
    return value.replace("%", "%%")


def _exec_start(words: list, whose: str = "vLLM's") -> str:
    """ExecStart's value: every word quoted; a word that cannot be one line in the unit is refused."""
    for i, word in enumerate(words):
        problem = line_problem(word)
        if problem:
            raise ModuleError(f"word {i} of the unit's ExecStart {problem}; every value on {whose} command line must be one line")
    return " ".join(_unit_quote(w) for w in words)


def _environment(name: str, value: str) -> str:
    """`Environment="NAME=value"`: one line, % doubled (a specifier there), quoted so blanks stay in the value."""
    text = _unit_setting("Environment", f"{name}={value}")
    return 'Environment="' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def program_unit(description: str, words: list, environment: dict, whose: str) -> str:
    """A unit for another program the tool keeps running (the monitor agent): its words quoted and its
    Environment= values checked as the server's are; restarted when it fails."""
    env = [_environment(k, v) for k, v in sorted(environment.items())]
    return "\n".join([
        "# Managed by dflash-provision (roles/monitoring); changes here are overwritten.",
        "[Unit]", f"Description={_unit_setting('Description', description)}", "",
        "[Service]", *env, f"ExecStart={_exec_start(words, whose)}", "Restart=on-failure", "RestartSec=5", "",
        "[Install]", "WantedBy=multi-user.target", "",
    ])


def render_unit(
    argv: list,
    env_file: str,
    log: str,
    launch_id: str,
    description: str,
    workdir: str,
    user: str | None = None,
) -> str:
    """A systemd unit: the server's output goes to journald and is appended to the log file.

    bash writes the start marker naming its own PID (the unit's MainPID), then runs vLLM with its
    output through `tee -a LOG`; pipefail keeps vLLM's exit status for Restart=on-failure.
    """
    script = (
        "set -o pipefail; "
        'printf "%s\\n" "=== dflash-provision: vLLM server start pid=$$ launch=$1" >> "$0"; '
        'shift; "$@" 2>&1 | tee -a "$0"'
    )
    exec_start = _exec_start(["/bin/bash", "-c", script, log, launch_id] + list(argv))
    lines = [
        "# Managed by dflash-provision (vllm-service role); changes here are overwritten.",
        "[Unit]",
        f"Description={_unit_setting('Description', description)}",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
    ]
    if user:
        lines.append(f"User={_unit_setting('User', user)}")
    lines += [
        f"WorkingDirectory={_unit_setting('WorkingDirectory', workdir)}",
        f"EnvironmentFile={_unit_setting('EnvironmentFile', env_file)}",
        f"ExecStart={exec_start}",
        "Restart=on-failure",
        "RestartSec=10",
        "KillMode=control-group",
        "KillSignal=SIGTERM",
        "TimeoutStopSec=60",
        "StandardOutput=journal",
        "StandardError=journal",
        "SyslogIdentifier=dflash-vllm",
        "LimitNOFILE=65536",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)


def choose_mode(use_systemd, systemd_present: bool, is_root: bool) -> str:
    """'systemd' or 'process'. auto: systemd where it is PID 1 and we may write system units."""
    if isinstance(use_systemd, str):
        low = use_systemd.strip().lower()
        use_systemd = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}.get(low, low)
    if use_systemd is True:
        if not systemd_present:
            raise ModuleError("vllm_use_systemd is true, but systemd is not PID 1 on this host; set it to auto or false")
        return "systemd"
    if use_systemd is False:
        return "process"
    if use_systemd not in (None, "auto"):
        raise ModuleError(f"vllm_use_systemd is {use_systemd!r}; choose auto, true or false")
    return "systemd" if systemd_present and is_root else "process"


def unsupervised_note(use_systemd, systemd_present: bool, is_root: bool) -> str | None:
    """Why auto mode left a host with systemd to an unsupervised process (the play is not root), or None.

    The tool's unit is a system unit (dflash_host/host/systemd.py), which only root may install; a login user
    without become gets a process nobody restarts after a crash or a reboot: said, not silent."""
    if isinstance(use_systemd, str):
        use_systemd = use_systemd.strip().lower()
    if use_systemd not in (None, "auto"):
        return None
    if not systemd_present or is_root:
        return None
    return ("systemd runs on this host, but the server is started as a plain process, unsupervised (no restart after "
            "a crash or a reboot), because the play does not run as root: set `become: true` on the play (or "
            "ansible_become: true for the host) to get a systemd unit, or vllm_use_systemd: false to choose the "
            "process on purpose")
