"""Values that reach vLLM's command line, its environment file or the systemd unit: each one line of text.

A newline in served_model_name once added an `ExecStartPre=` to the unit, and systemd's EnvironmentFile=
parser also breaks lines at a carriage return: every such value is checked here, naming the variable
and never the value, before anything is written. Used by vllm.launch and vllm.systemd_unit; standard library only.
"""

from __future__ import annotations

import json
import os
import re

from dflash_host.module import ModuleError

# Flags the launch always sets itself: giving them in vllm_extra_args would fight the rendered ones. The
# flags of vllm_server's table (dtype, max_model_len, ...) are refused there too whenever the launch sets them
# (vllm.launch.resolve adds them); left unset, they may be given in vllm_extra_args.
MANAGED_FLAGS = {
    "--model": "target_model",
    "--served-model-name": "served_model_name",
    "--host": "vllm_host",
    "--port": "vllm_port",
    "--speculative-config": "drafter_model / num_speculative_tokens / speculative_method",
    "--api-key": "vllm_api_key or vllm_api_key_file (kept out of the process list)",
}


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # fullmatch: `$` would let a final newline through
_NUMBER = re.compile(r"^-\d+(\.\d+)?$")
_FLAG = re.compile(r"^--[a-z0-9][a-z0-9._-]*(=.*)?$", re.S)
# Line breaks for systemd (\n, and \r in EnvironmentFile=), for str.splitlines (parse_env_file: also
# \v \f \x1c-\x1e \x85 U+2028 U+2029), NUL (execve), and the other control characters. Tab is fine.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_CHAR_NAMES = {"\n": "a newline", "\r": "a carriage return", "\x00": "a NUL byte"}
# A unit name we write as UNIT_DIR/NAME.service and pass to systemctl (a leading '-' would be an option).
_UNIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}")

# Role variables (module argument, the variable a person sets) that reach argv, the environment file
# or the unit as plain text. vllm_extra_args, vllm_env and the secrets are checked where they are read.
LINE_VALUES = (
    ("served_model_name", "served_model_name"),
    ("host", "vllm_host"),
    ("venv_python", "venv_python"),
    ("target_model", "target_model"),
    ("drafter_model", "drafter_model"),
    ("speculative_method", "speculative_method"),
    ("draft_attention_backend", "draft_attention_backend"),
    ("dtype", "dtype"),
    ("cache_root", "vllm_cache_root"),
    ("pidfile", "vllm_pidfile"),
    ("log", "vllm_log"),
    ("unit_dir", "vllm_unit_dir"),
    ("node_address", "cluster_node_address"),
)
# Values placed where vLLM's argument parser reads a leading '-' as a flag of its own.
FLAG_SLOT_VALUES = (("served_model_name", "served_model_name"), ("host", "vllm_host"), ("target_model", "target_model"))


def line_problem(text: str) -> str | None:
    """What keeps `text` from being one line of text in a unit, an env file or argv, in words; else None."""
    found = _CONTROL.search(text)
    if found:
        char = found.group()
        name = _CHAR_NAMES.get(char, f"the control character U+{ord(char):04X}")
        return f"contains {name} (at character {found.start()})"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"contains an unpaired surrogate (U+{ord(text[exc.start]):04X}), which is not UTF-8 text"
    return None


def check_line(value, var: str) -> None:
    """Refuse a value with a line break or control character, naming the variable and never the value."""
    problem = line_problem(str(value))
    if problem:
        raise ModuleError(
            f"{var} {problem}; a value that reaches the systemd unit, the environment file or vLLM's command "
            f"line must be one line of text (a line break there adds lines of its own to the unit); remove it"
        )


def check_launch_values(args: dict) -> None:
    """Every plain value bound for argv, the env file or the unit: one line, no flag look-alikes, a plain unit name."""
    for arg, var in LINE_VALUES:
        if args.get(arg) is not None:
            check_line(args[arg], var)
    for arg, var in FLAG_SLOT_VALUES:
        value = args.get(arg)
        if isinstance(value, str) and value.startswith("-"):
            raise ModuleError(
                f"{var} is {value!r}, which starts with '-': vLLM would read it as a flag of its own, not as the "
                f"value of {var}; fix {var}"
            )
    if args.get("service_name") is not None:
        name = str(args["service_name"])
        if not _UNIT_NAME.fullmatch(name):
            raise ModuleError(
                f"vllm_service_name is {name!r}: it names the unit file (vllm_unit_dir/NAME.service) and is passed to "
                f"systemctl, so it must be letters, digits, '_', '.', ':' and '-', starting with a letter or digit, "
                f"at most 200 characters; e.g. dflash-vllm"
            )
    if args.get("pidfile"):
        folder = os.path.dirname(os.path.abspath(os.path.expanduser(str(args["pidfile"]))))
        if folder.endswith("\\"):
            raise ModuleError(
                f"vllm_pidfile's folder {folder!r} ends with a backslash, which systemd reads as a line continuation "
                f"in the unit's WorkingDirectory= line; rename the folder or choose another vllm_pidfile"
            )


# Flags that carry a secret: vLLM's argument parser also takes any unambiguous prefix of them (--api-k),
# so a prefix is refused too, not only the whole name.
SECRET_FLAGS = ("--api-key",)


def managed_name(flag: str, taken: dict) -> str | None:
    """The managed flag `flag` reaches once vLLM's parser has read it, or None.

    vLLM's FlexibleArgumentParser turns underscores into dashes (--api_key is --api-key), and argparse
    accepts an unambiguous prefix of a long flag (--api-ke): for a secret-bearing flag both count."""
    name = "--" + flag[2:].replace("_", "-")
    if name in taken:
        return name
    for secret in SECRET_FLAGS:
        if secret in taken and len(name) > len("--a") and secret.startswith(name):
            return secret
    return None


def check_extra_args(extra: list, taken: dict | None = None) -> list:
    """Shape-check vllm_extra_args: flags start with --, values follow a flag, none of the flags the launch
    sets itself (`taken`: {flag: the variable that sets it}; MANAGED_FLAGS when not given)."""
    taken = MANAGED_FLAGS if taken is None else taken
    out = []
    expect_value_ok = False
    for i, item in enumerate(extra):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise ModuleError(
                f'vllm_extra_args[{i}] is {item!r}; each entry must be a string such as "--max-num-seqs" '
                "or the value after a flag"
            )
        text = str(item)
        check_line(text, f"vllm_extra_args[{i}]")
        if text.startswith("-") and not (expect_value_ok and _NUMBER.match(text)):
            if not _FLAG.match(text):
                raise ModuleError(
                    f"vllm_extra_args[{i}] is {text!r}: a vLLM flag must be written in its long form, "
                    "'--name' or '--name=value' in lower case (e.g. --tensor-parallel-size, not -tp); "
                    "fix vllm_extra_args"
                )
            name = managed_name(text.split("=", 1)[0], taken)
            if name is not None:
                raise ModuleError(
                    f"vllm_extra_args[{i}] is {text.split('=', 1)[0]}, which vLLM reads as {name}: the role sets it "
                    f"itself; use the variable {taken[name]} instead and remove it from vllm_extra_args"
                )
            expect_value_ok = "=" not in text
        elif not expect_value_ok:
            raise ModuleError(
                f"vllm_extra_args[{i}] is {text!r}, which is neither a flag (starting with --) nor the value "
                f'of the flag before it; write flags as "--name" followed by their value, e.g. '
                '["--max-num-seqs", "8"]'
            )
        else:
            expect_value_ok = False  # a flag takes at most one value here; JSON values are one string
        out.append(text)
    return out


def check_env(env: dict, var: str = "vllm_env") -> dict:
    if not isinstance(env, dict):
        raise ModuleError(f"{var} must be a mapping of NAME: value, got {type(env).__name__}")
    out = {}
    for key, value in env.items():
        if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
            raise ModuleError(f"{var} has the name {key!r}, which is not a valid environment variable name")
        if value is None:
            continue
        if isinstance(value, bool):
            value = "1" if value else "0"
        if isinstance(value, (dict, list)):
            value = json.dumps(value, separators=(",", ":"))
        text = str(value)
        check_line(text, f"{var}.{key}")
        out[key] = text
    return out
