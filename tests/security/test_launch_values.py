"""Values that reach the systemd unit, the environment file or vLLM's argv: one line of text each, or refused.

A newline in served_model_name once wrote an `ExecStartPre=` line into the unit; a carriage return in a
vllm_env value is a line break for systemd's EnvironmentFile= parser; a name starting with '-' is read by
vLLM as a flag. Each case runs the real vllm_launch.resolve (the place every value is checked before
anything is written), or the real vllm_server module against a temp folder, and checks that the value
is refused with its variable named and that nothing was written.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dflash_host.module import Context, ModuleError, execute
from dflash_host.vllm.launch import resolve
from dflash_host.vllm.records import parse_env_file, render_env_file
from dflash_host.vllm.systemd_unit import render_unit
from dflash_host.vllm.values import check_env
from library import vllm_server

# No example database and no explain phase: nothing is written into the checkout.
PROPERTY = settings(
    max_examples=200,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
)
INJECTED = "\nExecStartPre=/bin/touch /tmp/dfp-injected"


@pytest.fixture
def models(tmp_path):
    target, drafter = tmp_path / "models" / "target", tmp_path / "models" / "dflash"
    target.mkdir(parents=True)
    drafter.mkdir(parents=True)
    (target / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    (drafter / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"]}))
    return target, drafter


def base(models, **over) -> dict:
    target, drafter = models
    args = {
        "venv_python": "/env/bin/python",
        "target_model": str(target),
        "drafter_model": str(drafter),
        "served_model_name": "target",
        "host": "127.0.0.1",
        "port": 8011,
        "flavor": "cuda",
        "num_speculative_tokens": 3,
        "speculative_method": "dflash",
        "pidfile": "/srv/dfp/run/vllm.pid",
        "log": "/srv/dfp/logs/vllm.log",
        "service_name": "dflash-vllm",
        "unit_dir": "/etc/systemd/system",
        "cache_root": "/srv/dfp/cache/vllm",
    }
    args.update(over)
    return args


# (arguments, the variable the error must name, how the error must describe the character)
LINE_BREAKS = [
    ({"served_model_name": "target" + INJECTED}, "served_model_name", "a newline"),
    ({"served_model_name": "target\rExecStartPre=/x"}, "served_model_name", "a carriage return"),
    ({"served_model_name": "tar\x00get"}, "served_model_name", "a NUL byte"),
    ({"served_model_name": "tar\u2028get"}, "served_model_name", "U+2028"),  # str.splitlines() breaks there
    ({"served_model_name": "tar\ud800get"}, "served_model_name", "surrogate"),  # not UTF-8: the write would crash
    ({"cache_root": "/srv/cache" + INJECTED}, "vllm_cache_root", "a newline"),
    ({"extra_args": ["--max-num-seqs", "8\rExecStartPre=/x"]}, "vllm_extra_args[1]", "a carriage return"),
    ({"extra_args": ["--chat-template=a\x85b"]}, "vllm_extra_args[0]", "U+0085"),
    ({"env": {"A": "1\rB=2"}}, "vllm_env.A", "a carriage return"),  # systemd's env-file parser splits at \r
    ({"env": {"A": "1\x0bB=2"}}, "vllm_env.A", "U+000B"),  # parse_env_file (str.splitlines) splits there
    ({"env": {"A\n": "1"}}, "vllm_env", "'A\\n'"),  # `$` in the name pattern matched before a final newline
    ({"venv_python": "/env/bin/python" + INJECTED}, "venv_python", "a newline"),
    ({"target_model": "Qwen/Qwen3-8B" + INJECTED, "drafter_model": None}, "target_model", "a newline"),
    ({"host": "127.0.0.1" + INJECTED}, "vllm_host", "a newline"),
    ({"speculative_method": "dflash" + INJECTED}, "speculative_method", "a newline"),
    ({"draft_attention_backend": "flash_attn" + INJECTED}, "draft_attention_backend", "a newline"),
    ({"pidfile": "/srv/x" + INJECTED + "/vllm.pid"}, "vllm_pidfile", "a newline"),  # WorkingDirectory= line
    ({"log": "/srv/dfp/logs/vllm.log" + INJECTED}, "vllm_log", "a newline"),
    ({"unit_dir": "/etc/systemd/system" + INJECTED}, "vllm_unit_dir", "a newline"),
]


@pytest.mark.parametrize("over, variable, described", LINE_BREAKS, ids=[f"{c[1]}-{c[2]}" for c in LINE_BREAKS])
def test_a_line_break_or_control_character_is_refused_naming_the_variable(models, over, variable, described):
    with pytest.raises(ModuleError) as err:
        resolve(base(models, **over))
    assert variable in err.value.msg and described in err.value.msg


def test_a_drafter_folder_whose_name_holds_a_newline_is_refused(models, tmp_path):
    drafter = tmp_path / ("dflash" + INJECTED.replace("/", "_"))
    drafter.mkdir()
    (drafter / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"]}))
    with pytest.raises(ModuleError, match="drafter_model contains a newline"):
        resolve(base(models, drafter_model=str(drafter)))


@pytest.mark.parametrize("secret_var, arg", [("vllm_api_key", "api_key"), ("hf_token", "hf_token")])
def test_a_secret_with_a_carriage_return_is_refused_without_being_shown(models, secret_var, arg):
    with pytest.raises(ModuleError) as err:
        resolve(base(models, **{arg: "sk-abc\rHF_HUB_OFFLINE=0"}))
    assert secret_var in err.value.msg and "a carriage return" in err.value.msg
    assert "sk-abc" not in err.value.msg and "HF_HUB_OFFLINE=0" not in err.value.msg


@pytest.mark.parametrize(
    "over, variable",
    [
        ({"served_model_name": "--trust-remote-code"}, "served_model_name"),
        ({"target_model": "--trust-remote-code", "drafter_model": None}, "target_model"),
        ({"host": "--port=1"}, "vllm_host"),
    ],
)
def test_a_value_vllm_would_read_as_a_flag_is_refused(models, over, variable):
    with pytest.raises(ModuleError) as err:
        resolve(base(models, **over))
    assert variable in err.value.msg and "starts with '-'" in err.value.msg


@pytest.mark.parametrize(
    "name",
    ["../../../etc/systemd/system/evil", "dflash/vllm", "-dflash", "dflash vllm", "dflash\nvllm", "", "x" * 300],
)
def test_a_service_name_that_is_not_a_plain_unit_name_is_refused(models, name):
    with pytest.raises(ModuleError) as err:
        resolve(base(models, service_name=name))
    assert "vllm_service_name" in err.value.msg


def test_a_pidfile_folder_ending_in_a_backslash_is_refused(models):
    # `WorkingDirectory=/srv/x\` would join the next line of the unit to it (systemd's line continuation)
    with pytest.raises(ModuleError) as err:
        resolve(base(models, pidfile="/srv/x\\/vllm.pid"))
    assert "vllm_pidfile" in err.value.msg and "backslash" in err.value.msg


def test_unit_settings_outside_exec_start_escape_systemd_specifiers():
    unit = render_unit(["/env/bin/python"], "/srv/100%/run/vllm.env", "/srv/100%/logs/vllm.log", "abc", "vLLM", "/srv/100%/run")
    lines = unit.splitlines()
    assert "WorkingDirectory=/srv/100%%/run" in lines
    assert "EnvironmentFile=/srv/100%%/run/vllm.env" in lines
    assert lines[0].startswith("# Managed by dflash-provision")  # vllm_server proves the unit is ours by it


# ------------------------------------------------------------------------------------------------
# Property tests: whatever text a value holds, it is refused or it comes back exactly as it went in.


def systemd_exec_words(value: str) -> list:
    """Split an ExecStart= value as systemd does (systemd.service(5), "Command lines").

    Words are quoted and C-unescaped first, then specifiers resolved (%% -> %), then variables ($$ ->
    $). Only what _unit_quote emits is accepted: a bare %x or $NAME means systemd would substitute.
    """
    words, i = [], 0
    while i < len(value):
        if value[i] == " ":
            i += 1
            continue
        assert value[i] == '"', f"unquoted word at {i}: {value[i : i + 20]!r}"
        i += 1
        word = ""
        while value[i] != '"':
            if value[i] == "\\":
                assert value[i + 1] in '\\"', f"escape {value[i : i + 2]!r}"
                i += 1
            word += value[i]
            i += 1
        i += 1
        words.append(word)
    out = []
    for word in words:
        assert "%" not in word.replace("%%", ""), f"unescaped specifier in {word!r}"
        word = word.replace("%%", "%")
        assert "$" not in word.replace("$$", ""), f"unescaped variable in {word!r}"
        out.append(word.replace("$$", "$"))
    return out


UNIT_KEYS = {
    "Description", "After", "Wants", "Type", "User", "WorkingDirectory", "EnvironmentFile", "ExecStart",
    "Restart", "RestartSec", "KillMode", "KillSignal", "TimeoutStopSec", "StandardOutput", "StandardError",
    "SyslogIdentifier", "LimitNOFILE", "WantedBy",
}  # fmt: skip


@PROPERTY
@given(st.lists(st.text(max_size=12), min_size=1, max_size=4))
def test_every_exec_start_word_comes_back_exactly_or_the_unit_is_refused(words):
    argv = ["/env/bin/python", *words]
    try:
        unit = render_unit(argv, "/srv/d/run/vllm.env", "/srv/d/logs/vllm.log", "abc", "vLLM", "/srv/d/run")
    except ModuleError as err:
        assert (
            "newline" in err.msg
            or "control character" in err.msg
            or "carriage return" in err.msg
            or "NUL" in err.msg
            or "surrogate" in err.msg
        )
        return
    lines = [line for line in unit.split("\n") if line and not line.startswith(("#", "["))]
    assert {line.split("=", 1)[0] for line in lines} <= UNIT_KEYS  # no line was added
    exec_line = next(line for line in lines if line.startswith("ExecStart="))
    assert systemd_exec_words(exec_line[len("ExecStart=") :])[5:] == argv


@PROPERTY
@given(st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), st.text(max_size=12), max_size=4))
def test_every_env_value_round_trips_through_the_env_file_or_is_refused(env):
    try:
        checked = check_env(env)
    except ModuleError as err:
        assert "vllm_env." in err.msg
        return
    text = render_env_file(checked)
    assert parse_env_file(text) == checked
    assert len(text.splitlines()) == 1 + len(checked)  # the header and one line per variable


# ------------------------------------------------------------------------------------------------
# The real module against a temp folder: refused, and nothing written.


def files_under(folder: Path) -> list:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("use_systemd", [True, False], ids=["systemd", "process"])
@pytest.mark.parametrize(
    "over, variable",
    [
        ({"served_model_name": "target" + INJECTED}, "served_model_name"),
        ({"cache_root": "{tmp}/cache" + INJECTED}, "vllm_cache_root"),
        ({"extra_args": ["--max-num-seqs", "8\rExecStartPre=/bin/touch /tmp/dfp-injected"]}, "vllm_extra_args[1]"),
        ({"extra_args": ["--max-num-seqs", "8" + INJECTED]}, "vllm_extra_args[1]"),
    ],
    ids=["served_model_name-newline", "cache_root-newline", "extra_args-carriage-return", "extra_args-newline"],
)
def test_the_module_refuses_an_injected_line_and_writes_nothing(models, tmp_path, over, variable, use_systemd):
    target, drafter = models
    for folder in ("run", "logs", "units", "cache"):
        (tmp_path / folder).mkdir()
    args = {
        "state": "rendered",
        "pidfile": str(tmp_path / "run" / "vllm.pid"),
        "log": str(tmp_path / "logs" / "vllm.log"),
        "venv_python": sys.executable,
        "target_model": str(target),
        "drafter_model": str(drafter),
        "served_model_name": "target",
        "port": 8011,
        "flavor": "cpu",
        "num_speculative_tokens": 3,
        "use_systemd": use_systemd,
        "systemd_present": True,
        "unit_dir": str(tmp_path / "units"),
        "service_name": "dfp-test-injection",
    }
    args.update({k: (v.replace("{tmp}", str(tmp_path)) if isinstance(v, str) else v) for k, v in over.items()})
    before = files_under(tmp_path)
    res = execute(vllm_server.ARGS, vllm_server.run, args, Context(), "vllm_server")
    assert res["failed"] and variable in res["msg"], res["msg"]
    assert files_under(tmp_path) == before
    assert not os.path.exists("/tmp/dfp-injected")


def test_a_venv_python_whose_real_folder_holds_a_newline_is_refused(models, tmp_path):
    # venv_root/current -> envs/<name>: argv[0] is the real folder, so the symlink's target name reaches the unit
    real = tmp_path / "envs" / ("abc" + INJECTED.replace("/", "_")) / "bin"
    real.mkdir(parents=True)
    (tmp_path / "current").symlink_to(real.parent)
    with pytest.raises(ModuleError) as err:
        resolve(base(models, venv_python=str(tmp_path / "current" / "bin" / "python")))
    assert "venv_python's real path" in err.value.msg and "a newline" in err.value.msg
