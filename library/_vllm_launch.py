"""Render the vLLM launch: argv, environment file, systemd unit, fingerprint; validate the inputs.

Everything here is a pure decision (no process is started): given the role's variables, what command
line, environment and unit should run, and is the input sane? Secrets (API key, HF token) go only into
the environment file (mode 0600), never into argv, the unit, a message or a diff.

Every value that reaches the unit, the environment file or argv is one line of text, checked in
`resolve` before anything is written: a newline in served_model_name once added an `ExecStartPre=` to
the unit, and systemd's EnvironmentFile= parser also breaks lines at a carriage return.

Standard library only; used by vllm_server.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from _common import ModuleError
from _safetensors import load_json_file

SECRET_WORDS = ("TOKEN", "KEY", "PASSWORD", "SECRET")
MASK = "********"
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")

# Flags the role renders itself: giving them in vllm_extra_args would fight the rendered ones.
MANAGED_FLAGS = {
    "--model": "target_model",
    "--served-model-name": "served_model_name",
    "--host": "vllm_host",
    "--port": "vllm_port",
    "--speculative-config": "drafter_model / num_speculative_tokens / speculative_method",
    "--api-key": "vllm_api_key or vllm_api_key_file (kept out of the process list)",
    "--dtype": "dtype",
    "--max-model-len": "max_model_len",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--tensor-parallel-size": "tensor_parallel_size",
    "--enforce-eager": "enforce_eager",
    "--language-model-only": "language_model_only",
}

# What a flavor implies when the variable is left empty (null).
FLAVOR_DEFAULTS = {
    "cpu": {
        "dtype": "float32",
        "max_model_len": 512,
        "enforce_eager": True,
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_HOST_IP": "127.0.0.1"},
    },
    "cuda": {"dtype": None, "max_model_len": None, "enforce_eager": False, "env": {}},
}
FLAVOR_DEFAULTS["none"] = FLAVOR_DEFAULTS["cuda"]  # the venv role's flavor for environments without vLLM
COMMON_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # fullmatch: `$` would let a final newline through
_NUMBER = re.compile(r"^-\d+(\.\d+)?$")
_FLAG = re.compile(r"^--[a-z0-9][a-z0-9._-]*(=.*)?$", re.S)
# Line breaks for systemd (\n, and \r in EnvironmentFile=), for str.splitlines (parse_env_file: also
# \v \f \x1c-\x1e \x85 U+2028 U+2029), NUL (execve), and the other control characters. Tab is fine.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_CHAR_NAMES = {"\n": "a newline", "\r": "a carriage return", "\x00": "a NUL byte"}
# A unit name we write as UNIT_DIR/NAME.service and pass to systemctl (a leading '-' would be an option).
_UNIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}")
MAX_MODEL_CONFIG_BYTES = 16 * 2**20
MAX_MODEL_CONFIG_DEPTH = 64

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
)
# Values placed where vLLM's argument parser reads a leading '-' as a flag of its own.
FLAG_SLOT_VALUES = (("served_model_name", "served_model_name"), ("host", "vllm_host"), ("target_model", "target_model"))


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def masked_env(env: dict) -> dict:
    return {k: (MASK if is_secret_name(k) else v) for k, v in sorted(env.items())}


def looks_like_path(model: str) -> bool:
    """A local folder (absolute, ~, ./) rather than a Hugging Face id such as Qwen/Qwen3-8B."""
    return model.startswith(("/", "~", "./", "../")) or os.path.exists(model)


# --------------------------------------------------------------------------- validation


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


def check_extra_args(extra: list) -> list:
    """Shape-check vllm_extra_args: flags start with --, values follow a flag, no managed flags."""
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
            name = text.split("=", 1)[0]
            if name in MANAGED_FLAGS:
                raise ModuleError(
                    f"vllm_extra_args[{i}] is {name}, which the role sets itself; use the variable "
                    f"{MANAGED_FLAGS[name]} instead and remove it from vllm_extra_args"
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


def read_model_config(model: str, var: str) -> dict | None:
    """config.json of a local model folder (ModuleError naming `var` if missing); None for a hub id."""
    if not looks_like_path(model):
        return None
    path = os.path.expanduser(model)
    if not os.path.isdir(path):
        raise ModuleError(
            f"{var} is {model!r}, which does not exist on this host (or is not a folder); put the model "
            f"there (for the local host: tiny_models: true generates one) or fix {var}"
        )
    cfg_path = os.path.join(path, "config.json")
    try:
        data = load_json_file(cfg_path, MAX_MODEL_CONFIG_BYTES, MAX_MODEL_CONFIG_DEPTH)
    except FileNotFoundError:
        hint = " (the drafter-config role writes it: run it before vllm-service)" if var == "drafter_model" else ""
        raise ModuleError(f"{var} {path} has no config.json; vLLM cannot load it{hint}")
    except (OSError, ValueError) as exc:
        raise ModuleError(f"{var}: {cfg_path} cannot be read as JSON ({exc}); fix or regenerate it")
    if not isinstance(data, dict):
        raise ModuleError(f"{var}: {cfg_path} is not a JSON object; fix or regenerate it")
    return data


def model_stat(model: str) -> dict:
    """What identifies a model's files for the fingerprint: name, size and mtime of configs and weights."""
    if not looks_like_path(model):
        return {"hub_id": model}
    path = os.path.expanduser(model)
    files = {}
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return {"path": path, "files": {}}
    for name in names:
        if name.endswith((".json", ".safetensors", ".jinja", ".model")):
            try:
                st = os.stat(os.path.join(path, name))
            except OSError:
                continue
            files[name] = [st.st_size, st.st_mtime_ns]
    return {"path": path, "files": files}


def read_secret(value: str | None, file: str | None, var: str) -> str | None:
    if value and file:
        raise ModuleError(f"both {var} and {var}_file are set; keep one of them")
    if file:
        path = os.path.expanduser(file)
        try:
            with open(path, encoding="utf-8") as fh:
                value = fh.read().strip()
        except OSError as exc:
            raise ModuleError(f"{var}_file {path} cannot be read ({exc.strerror}); fix the path or its permissions")
        if not value:
            raise ModuleError(f"{var}_file {path} is empty; put the secret in it or unset {var}_file")
    if value is not None:
        check_line(value, var)  # the message names the variable, never the secret
    return value or None


# --------------------------------------------------------------------------- rendering


def env_own_python(venv_python: str) -> str:
    """venv_root/current/bin/python -> venv_root/envs/<hash>/bin/python: the folder's symlinks resolved,
    the interpreter's own link kept. The server then runs from its environment's own path (a later
    switch of `current` never changes files under it), and a switch changes the launch, which restarts
    the server onto the new environment."""
    path = os.path.expanduser(venv_python)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def resolve(args: dict, is_multimodal=None) -> dict:
    """Validate the role's variables and compute the launch: argv, env, expectations.

    Reads the models' config.json (host I/O limited to that); everything else is pure.
    """
    check_launch_values(args)
    flavor = args.get("flavor") or "cuda"
    if flavor not in FLAVOR_DEFAULTS:
        raise ModuleError(f"vllm_flavor is {flavor!r}; choose one of: {', '.join(sorted(FLAVOR_DEFAULTS))}")
    fdef = FLAVOR_DEFAULTS[flavor]

    port = args.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ModuleError(f"vllm_port is {port!r}; it must be a whole number from 1 to 65535")
    host = args.get("host") or "127.0.0.1"
    served = args.get("served_model_name")
    if not served or not str(served).strip():
        raise ModuleError("served_model_name is empty; set the name clients use in requests (e.g. target)")
    venv_python = args.get("venv_python")
    if not venv_python:
        raise ModuleError("venv_python is empty; it is the serving environment's python (set by the venv role)")

    model = args.get("target_model")
    if not model:
        raise ModuleError("target_model is empty; set it to the model folder on the host or a Hugging Face id")
    target_cfg = read_model_config(model, "target_model")

    drafter = args.get("drafter_model")
    spec_cfg = None
    drafter_cfg = None
    if drafter:
        if not os.path.isdir(os.path.expanduser(drafter)):
            raise ModuleError(
                f"drafter_model is {drafter!r}, which does not exist on this host; put the DFlash drafter "
                "there or fix drafter_model (set it to null to serve without speculative decoding)"
            )
        drafter_cfg = read_model_config(drafter, "drafter_model")
        nst = args.get("num_speculative_tokens")
        if nst is None:
            raise ModuleError(
                "num_speculative_tokens is missing; a drafter needs it (DFlash: block_size - 1, e.g. 15 "
                "for a block_size-16 drafter, 3 for the tiny local one)"
            )
        if not isinstance(nst, int) or isinstance(nst, bool) or nst < 1:
            raise ModuleError(f"num_speculative_tokens is {nst!r}; it must be a whole number of at least 1")
        method = args.get("speculative_method") or "dflash"
        spec_cfg = {"method": method, "model": os.path.expanduser(drafter), "num_speculative_tokens": nst}
        if args.get("draft_attention_backend"):
            spec_cfg["attention_backend"] = str(args["draft_attention_backend"])

    dtype = args.get("dtype") or fdef["dtype"]
    if dtype is not None and dtype not in DTYPES:
        raise ModuleError(f"dtype is {dtype!r}; choose one of: {', '.join(DTYPES)}")
    max_model_len = args.get("max_model_len")
    if max_model_len is None:
        max_model_len = fdef["max_model_len"]
    for var, value, low in (
        ("max_model_len", max_model_len, 1),
        ("max_num_batched_tokens", args.get("max_num_batched_tokens"), 1),
        ("tensor_parallel_size", args.get("tensor_parallel_size"), 1),
    ):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < low):
            raise ModuleError(f"{var} is {value!r}; it must be a whole number of at least {low} (or null)")
    gmu = args.get("gpu_memory_utilization")
    if gmu is not None and (isinstance(gmu, bool) or not isinstance(gmu, (int, float)) or not 0 < gmu <= 1):
        raise ModuleError(f"gpu_memory_utilization is {gmu!r}; it must be a fraction in (0, 1], e.g. 0.9")
    enforce_eager = args.get("enforce_eager")
    if enforce_eager is None:
        enforce_eager = fdef["enforce_eager"]

    lmo = args.get("language_model_only")
    if lmo in (None, "auto"):
        lmo = bool(target_cfg is not None and is_multimodal is not None and is_multimodal(target_cfg))
    elif isinstance(lmo, str):
        lmo = lmo.strip().lower() in ("true", "yes", "on", "1")

    extra = check_extra_args(list(args.get("extra_args") or []))

    argv = [env_own_python(venv_python), "-m", "vllm.entrypoints.cli.main", "serve"]
    argv += [os.path.expanduser(model) if target_cfg is not None else model]
    argv += ["--served-model-name", str(served), "--host", host, "--port", str(port)]
    if spec_cfg:
        argv += ["--speculative-config", json.dumps(spec_cfg, separators=(",", ":"))]
    if dtype:
        argv += ["--dtype", dtype]
    if max_model_len is not None:
        argv += ["--max-model-len", str(max_model_len)]
    if args.get("max_num_batched_tokens") is not None:
        argv += ["--max-num-batched-tokens", str(args["max_num_batched_tokens"])]
    if gmu is not None:
        argv += ["--gpu-memory-utilization", f"{float(gmu):g}"]
    if args.get("tensor_parallel_size") is not None:
        argv += ["--tensor-parallel-size", str(args["tensor_parallel_size"])]
    if enforce_eager:
        argv += ["--enforce-eager"]
    if lmo:
        argv += ["--language-model-only"]
    argv += extra

    env = dict(COMMON_ENV)
    env.update(fdef["env"])
    if target_cfg is not None and (drafter is None or drafter_cfg is not None):
        env.update(OFFLINE_ENV)  # every model is local: never try the network
    cache_root = args.get("cache_root")
    if cache_root:
        cache_root = os.path.expanduser(cache_root)
        env.update(
            VLLM_CACHE_ROOT=cache_root,
            TORCHINDUCTOR_CACHE_DIR=os.path.join(cache_root, "inductor"),
            TRITON_CACHE_DIR=os.path.join(cache_root, "triton"),
        )
    env.update(check_env(args.get("env") or {}))
    api_key = read_secret(args.get("api_key"), args.get("api_key_file"), "vllm_api_key")
    hf_token = read_secret(args.get("hf_token"), args.get("hf_token_file"), "hf_token")
    if api_key:
        env["VLLM_API_KEY"] = api_key
    if hf_token:
        env["HF_TOKEN"] = hf_token

    expected = []
    target_arch = args.get("expected_architecture")
    if not target_arch and target_cfg is not None:
        archs = target_cfg.get("architectures") or []
        target_arch = archs[0] if archs else None
    if target_arch:
        expected.append(str(target_arch))
    if drafter_cfg is not None:
        archs = drafter_cfg.get("architectures") or ["DFlashDraftModel"]
        expected.append(str(archs[0]))

    check_assembled(argv, env)
    return {
        "flavor": flavor,
        "argv": argv,
        "env": env,
        "host": host,
        "port": port,
        "served_model_name": str(served),
        "speculative": spec_cfg,
        "language_model_only": lmo,
        "expected_architectures": expected,
        "models": {"target": model_stat(model), "drafter": model_stat(drafter) if drafter else None},
    }


def check_assembled(argv: list, env: dict) -> None:
    """The assembled launch once more, for what no variable check sees: venv_python through a symlink whose
    target's name holds a newline, a ~ that expands to one, a value added here later without a check."""
    for i, word in enumerate(argv):
        problem = line_problem(word)
        if problem:
            what = "venv_python's real path (symlinks resolved)" if i == 0 else f"word {i} of vLLM's command line"
            raise ModuleError(f"{what} {problem}; it would reach the systemd unit; fix the path or the variable behind it")
    for key, value in env.items():
        problem = line_problem(value)
        if problem:
            raise ModuleError(f"the server's environment variable {key} {problem}; fix the variable that sets it")


def _env_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`") + '"'


def render_env_file(env: dict) -> str:
    """KEY="value" lines, readable by systemd's EnvironmentFile= and by parse_env_file."""
    lines = ["# Managed by dflash-provision (vllm-service role): the vLLM server's environment. Mode 0600."]
    lines += [f"{k}={_env_quote(v)}" for k, v in sorted(env.items())]
    return "\n".join(lines) + "\n"


def parse_env_file(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
            raw, value, i = value[1:-1], "", 0
            while i < len(raw):
                if raw[i] == "\\" and i + 1 < len(raw):
                    value += raw[i + 1]
                    i += 2
                else:
                    value += raw[i]
                    i += 1
        out[key.strip()] = value
    return out


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


def _exec_start(words: list) -> str:
    """ExecStart's value: every word quoted; a word that cannot be one line in the unit is refused."""
    for i, word in enumerate(words):
        problem = line_problem(word)
        if problem:
            raise ModuleError(f"word {i} of the unit's ExecStart {problem}; every value on vLLM's command line must be one line")
    return " ".join(_unit_quote(w) for w in words)


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


def fingerprint(argv: list, env_text: str, models: dict, mode: str, unit_text: str | None) -> str:
    """What decides whether a running server is the wanted one; secrets enter only as a hash."""
    blob = json.dumps(
        {
            "argv": argv,
            "env": hashlib.sha256(env_text.encode()).hexdigest(),
            "models": models,
            "mode": mode,
            "unit": unit_text,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


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
