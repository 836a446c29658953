"""Resolve the vLLM launch from the role's variables: argv, environment, what the log must show.

Everything here is a pure decision (no process is started): given the role's variables, what command
line and environment should run, and is the input sane? Secrets (API key, HF token) go only into
the environment file (mode 0600), never into argv, the unit, a message or a diff.

Every value that reaches the unit, the environment file or argv is one line of text, checked in
`resolve` (through vllm.values) before anything is written. The environment file and the unit are
rendered by vllm.records and vllm.systemd_unit. Standard library only; used by vllm.server.
"""

from __future__ import annotations

import json
import os
from typing import Any

from dflash_host.host.tokens import read_secret
from dflash_host.models.config import locate_model, looks_like_path, read_config_json
from dflash_host.module import ModuleError
from dflash_host.vllm.cluster import check_node_address, cluster_settings
from dflash_host.vllm.runner import runner_env
from dflash_host.vllm.values import MANAGED_FLAGS, check_env, check_extra_args, check_launch_values, check_line, line_problem

SECRET_WORDS = ("TOKEN", "KEY", "PASSWORD", "SECRET")
MASK = "********"

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



def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def masked_env(env: dict) -> dict:
    return {k: (MASK if is_secret_name(k) else v) for k, v in sorted(env.items())}


# --------------------------------------------------------------------------- the models and secrets it reads


def located(args: dict, var: str) -> str | None:
    """A model variable as the launch uses it: a Hub id found in the tool's cache (hf_home, at the variable's
    revision) or the host's becomes its snapshot folder (local, offline, the commit in the path); anything
    else stays as written (a path, or an uncached Hub id vLLM downloads)."""
    value = args.get(var)
    if not value or looks_like_path(str(value)):
        return value
    found = locate_model(str(value), hf_home=args.get("hf_home"), revision=args.get(var.replace("_model", "_revision")))
    return found.path or value


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
    if not os.path.lexists(cfg_path):
        hint = " (the drafter-config role writes it: run it before vllm-service)" if var == "drafter_model" else ""
        raise ModuleError(f"{var} {path} has no config.json; vLLM cannot load it{hint}")
    return read_config_json(cfg_path, f"{var}'s config.json", "fix or regenerate it")


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


# --------------------------------------------------------------------------- rendering


def env_own_python(venv_python: str) -> str:
    """venv_root/current/bin/python -> venv_root/envs/<hash>/bin/python: the folder's symlinks resolved,
    the interpreter's own link kept. The server then runs from its environment's own path (a later
    switch of `current` never changes files under it), and a switch changes the launch, which restarts
    the server onto the new environment."""
    path = os.path.expanduser(venv_python)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


# --------------------------------------------------------------------------- vLLM's flags, from a table
# vllm_server's ARGS is the table: every entry with a "flag" is one vLLM option, written on the command line
# (and so in the fingerprint) in the table's order when its value is set. Its "kind" says how the value is
# checked and written; "var" names the variable in messages; a flavor may imply a value (FLAVOR_DEFAULTS).
#   count     a whole number of at least 1             --flag N
#   index     a whole number of at least 0             --flag N (0 is written)
#   port      a whole number from 1 to 65535            --flag N
#   fraction  a number in (0, 1]                        --flag 0.9
#   choice    one of the entry's "one_of"               --flag WORD
#   text      one line, not starting with '-'           --flag TEXT
#   switch    true or false                             --flag (only when true)
WHOLE_KINDS = ("count", "index", "port")


def _number_text(value: Any, kind: str) -> Any:
    """`-e name=8` gives text: a count or fraction written as text is read as the number it spells."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if kind in WHOLE_KINDS and text.lstrip("-").isdigit():
        return int(text)
    if kind == "fraction":
        try:
            return float(text)
        except ValueError:
            return value
    return value


def flag_value(name: str, entry: dict, value: Any) -> Any:
    """The checked value of one table flag; None (or False for a switch) leaves it off the command line."""
    var, kind = entry.get("var", name), entry.get("kind", "count")
    if value is None:
        return None
    value = _number_text(value, kind)
    whole = isinstance(value, int) and not isinstance(value, bool)
    if kind == "count" and (not whole or value < 1):
        raise ModuleError(f"{var} is {value!r}; it must be a whole number of at least 1 (or null)")
    if kind == "index" and (not whole or value < 0):
        raise ModuleError(f"{var} is {value!r}; it must be a whole number of at least 0 (or null)")
    if kind == "port" and (not whole or not 1 <= value <= 65535):
        raise ModuleError(f"{var} is {value!r}; it must be a port number from 1 to 65535 (or null)")
    if kind == "text":
        return _text_value(var, value)
    if kind == "fraction" and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1):
        raise ModuleError(f"{var} is {value!r}; it must be a fraction in (0, 1], e.g. 0.9")
    if kind == "choice" and value not in entry["one_of"]:
        raise ModuleError(f"{var} is {value!r}; choose one of: {', '.join(entry['one_of'])}")
    if kind == "switch" and isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value) if kind == "switch" else value


def _text_value(var: str, value: Any) -> str | None:
    """A text flag's value: one line, stripped; empty means unset; a leading '-' would read as a flag."""
    text = str(value).strip()
    check_line(text, var)
    if text.startswith("-"):
        raise ModuleError(f"{var} is {text!r}, which starts with '-': vLLM would read it as a flag of its own; fix {var}")
    return text or None


def flag_words(entry: dict, value: Any) -> list:
    """What one table flag adds to vLLM's command line."""
    if value is None or value is False:
        return []
    if entry.get("kind") == "switch":
        return [entry["flag"]]
    if entry.get("kind") == "fraction":
        return [entry["flag"], f"{float(value):g}"]
    return [entry["flag"], str(value)]


def flag_table(table: dict | None) -> dict:
    """The entries of a module's ARGS that are vLLM flags, in order."""
    return {name: entry for name, entry in (table or {}).items() if isinstance(entry, dict) and entry.get("flag")}


def flag_values(args: dict, flags: dict, flavor: dict, given: dict) -> dict:
    """{name: checked value} of every table flag: the argument, else what the flavor implies (`given` wins)."""
    out = {}
    for name, entry in flags.items():
        value = given[name] if name in given else args.get(name)
        if value is None or value == "":
            value = flavor.get(name)
        out[name] = flag_value(name, entry, value)
    return out


# --------------------------------------------------------------------------- the launch


def _flavor(args: dict) -> tuple:
    flavor = args.get("flavor")
    if flavor not in FLAVOR_DEFAULTS:
        raise ModuleError(f"vllm_flavor is {flavor!r}; choose one of: {', '.join(sorted(FLAVOR_DEFAULTS))}")
    return flavor, FLAVOR_DEFAULTS[flavor]


def _identity(args: dict, headless: bool) -> tuple:
    """(host, port, served name, venv_python): where the server listens, what it serves, which python runs it.
    A headless node listens nowhere: host and port are None (vllm_host and vllm_port are not read)."""
    host, port = None, None
    if not headless:
        port = _number_text(args.get("port"), "count")
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise ModuleError(f"vllm_port is {port!r}; it must be a whole number from 1 to 65535")
        host = args.get("host")
        if not host:
            raise ModuleError("vllm_host is empty; set the address vLLM listens on (e.g. 127.0.0.1)")
    served = args.get("served_model_name")
    if not served or not str(served).strip():
        raise ModuleError("served_model_name is empty; set the name clients use in requests (e.g. target)")
    venv_python = args.get("venv_python")
    if not venv_python:
        raise ModuleError("venv_python is empty; it is the serving environment's python (set by the venv role)")
    return host, port, str(served), venv_python


def _speculative(args: dict) -> tuple:
    """(speculative-config, drafter's config.json) for a drafter; (None, None) without one."""
    drafter = located(args, "drafter_model")
    if not drafter:
        return None, None
    if not os.path.isdir(os.path.expanduser(drafter)):
        raise ModuleError(
            f"drafter_model is {drafter!r}, which does not exist on this host; put the DFlash drafter "
            "there or fix drafter_model (set it to null to serve without speculative decoding)"
        )
    drafter_cfg = read_model_config(drafter, "drafter_model")
    nst = _number_text(args.get("num_speculative_tokens"), "count")
    if nst is None:
        raise ModuleError(
            "num_speculative_tokens is missing; a drafter needs it (DFlash: block_size - 1, e.g. 15 "
            "for a block_size-16 drafter, 3 for the tiny local one)"
        )
    if not isinstance(nst, int) or isinstance(nst, bool) or nst < 1:
        raise ModuleError(f"num_speculative_tokens is {nst!r}; it must be a whole number of at least 1")
    method = args.get("speculative_method") or "dflash"
    spec_cfg = {"method": method, "model": os.path.expanduser(drafter), "num_speculative_tokens": nst}
    bands = check_schedule(args.get("speculative_schedule"), nst)
    if bands:
        spec_cfg["num_speculative_tokens_per_batch_size"] = bands
    if args.get("draft_attention_backend"):
        spec_cfg["attention_backend"] = str(args["draft_attention_backend"])
    return spec_cfg, drafter_cfg


def check_schedule(value: Any, k: int) -> list | None:
    """speculative_schedule as vLLM's num_speculative_tokens_per_batch_size takes it: [[first, last, k], ...],
    inclusive bands of batch sizes from 1, sorted and apart, each k from 0 to num_speculative_tokens."""
    if value in (None, "", []):
        return None
    fix = "; write it as [[1, 8, 5], [9, 1024, 3]] (tune writes it), or remove it"
    if not isinstance(value, list):
        raise ModuleError(f"speculative_schedule is {value!r}, not a list of [first, last, k] bands{fix}")
    bands, after = [], 0
    for i, band in enumerate(value):
        if not (isinstance(band, list) and len(band) == 3 and all(isinstance(x, int) and not isinstance(x, bool) for x in band)):
            raise ModuleError(f"speculative_schedule[{i}] is {band!r}, not [first, last, k] in whole numbers{fix}")
        first, last, kk = band
        if first != after + 1 or last < first:
            raise ModuleError(f"speculative_schedule[{i}] is {band!r}: bands must run from batch size 1 upwards, "
                              f"each starting right after the last one ({after + 1}){fix}")
        if not 0 <= kk <= k:
            raise ModuleError(f"speculative_schedule[{i}] asks for k={kk}, outside 0..num_speculative_tokens ({k}){fix}")
        bands.append([first, last, kk])
        after = last
    return bands


def _language_model_only(args: dict, target_cfg: dict | None, is_multimodal: Any) -> Any:
    """auto (or null): on when the target's config.json is multimodal; else the value given."""
    lmo = args.get("language_model_only")
    if lmo in (None, "auto"):
        return bool(target_cfg is not None and is_multimodal is not None and is_multimodal(target_cfg))
    return lmo


def _environment(args: dict, flavor_env: dict, all_local: bool) -> dict:
    """The server's environment: the tool's, the flavor's, offline when every model is local, the compile
    cache, vllm_env, and the secrets (which go only to the 0600 environment file)."""
    env = dict(COMMON_ENV)
    env.update(flavor_env)
    node_address = (args.get("node_address") or "").strip()
    if node_address:
        if (args.get("env") or {}).get("VLLM_HOST_IP") not in (None, node_address):
            raise ModuleError(
                "vllm_env sets VLLM_HOST_IP and cluster_node_address sets it to another value; keep one of them "
                "(cluster_node_address is the node's own address on the cluster network)"
            )
        env["VLLM_HOST_IP"] = node_address  # over the cpu flavor's 127.0.0.1
    if all_local:
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
    if hf_token and not all_local:  # a server whose models are all on the host never needs the token
        env["HF_TOKEN"] = hf_token
    return env


def _expected_architectures(args: dict, target_cfg: dict | None, drafter_cfg: dict | None) -> list:
    """What the log's `Resolved architecture:` lines must show: the target's, then the drafter's."""
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
    return expected


def resolve(args: dict, is_multimodal: Any = None, table: dict | None = None) -> dict:
    """Validate the role's variables and compute the launch: argv, env, expectations.

    `table` is the module's ARGS: its entries with a "flag" are the vLLM flags written from their values.
    Reads the models' config.json (host I/O limited to that); everything else is pure.
    """
    check_launch_values(args)
    flavor, fdef = _flavor(args)
    model = located(args, "target_model")
    if not model:
        raise ModuleError("target_model is empty; set it to the model folder on the host or a Hugging Face id")
    target_cfg = read_model_config(model, "target_model")
    spec_cfg, drafter_cfg = _speculative(args)
    flags = flag_table(table)
    lmo = _language_model_only(args, target_cfg, is_multimodal)
    values = flag_values(args, flags, fdef, {"language_model_only": lmo} if "language_model_only" in flags else {})
    cluster = cluster_settings(values)
    host, port, served, venv_python = _identity(args, bool(cluster and cluster["headless"]))
    taken = dict(MANAGED_FLAGS)
    taken.update({flags[n]["flag"]: flags[n].get("var", n) for n, v in values.items() if v is not None and v is not False})
    extra = check_extra_args(list(args.get("extra_args") or []), taken)

    head = [env_own_python(venv_python), "-m", "vllm.entrypoints.cli.main", "serve"]
    head += [os.path.expanduser(model) if target_cfg is not None else model, "--served-model-name", served]
    parts = {"head": head, "tail": [word for name, entry in flags.items() for word in flag_words(entry, values[name])] + extra}
    argv = compose_argv(parts, host, port, spec_cfg)

    drafter = located(args, "drafter_model")
    env = _environment(args, fdef["env"], target_cfg is not None and (not drafter or drafter_cfg is not None))
    runner = runner_env(drafter_cfg, os.path.join(os.path.expanduser(drafter or ""), "config.json"), env)
    env.update(runner)  # a DFlash 2 drafter drafts as DFlash 1 on the V1 runner, silently (vllm.runner)
    check_node_address(cluster, env)
    check_assembled(argv, env)
    return {
        "cluster": cluster,
        "flavor": flavor,
        "argv": argv,
        "argv_parts": parts,
        "values": launch_values(values, flags, extra),
        "env": env,
        "host": host,
        "port": port,
        "served_model_name": served,
        "speculative": spec_cfg,
        "language_model_only": bool(values.get("language_model_only", lmo)),
        "expected_architectures": _expected_architectures(args, target_cfg, drafter_cfg),
        "runner_env": runner,
        "models": {"target": model_stat(model), "drafter": model_stat(drafter) if drafter else None},
    }


def compose_argv(parts: dict, host: str | None, port: int | None, speculative: dict | None) -> list:
    """The one assembly of vLLM's command line: the fixed head (python, serve, the model, its served name),
    where it listens, the drafter's speculative config, then the table's flags and vllm_extra_args (the
    tail). The configured launch and every measurement variant (vllm.variant) are composed here."""
    argv = list(parts["head"])
    if host is not None:  # the head or a single host serves the API; a headless node listens nowhere
        argv += ["--host", host, "--port", str(port)]
    if speculative:
        argv += ["--speculative-config", json.dumps(speculative, separators=(",", ":"))]
    return argv + list(parts["tail"])


def launch_values(values: dict, flags: dict, extra: list) -> dict:
    """{name: checked value} of the table flags the launch sets, also where vllm_extra_args set one whose
    variable is unset (check_extra_args allows that): what later steps read instead of the argv."""
    out = {name: value for name, value in values.items() if value is not None and value is not False}
    by_flag = {entry["flag"]: name for name, entry in flags.items() if name not in out}
    for i, word in enumerate(extra):
        flag, eq, text = word.partition("=")
        name = by_flag.get(flag)
        if name is None:
            continue
        kind = flags[name].get("kind", "count")
        if kind == "switch":
            out[name] = True
        elif eq or i + 1 < len(extra):
            out[name] = _number_text(text if eq else extra[i + 1], kind)
    return out


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
