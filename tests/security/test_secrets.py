"""Secrets never appear in the console, the JSON report or the JUnit report, whatever their source and type.

Each case runs the real CLI (`python3 -m invoke play`) as a subprocess on the local host and searches
everything it wrote for the secret's text.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def run_cli(tmp_path: Path, play: dict, *extra: str, roles: dict | None = None) -> tuple[int, str]:
    """Run the play through the CLI; return the exit code and console + JSON + JUnit text together."""
    (tmp_path / "pb.yaml").write_text(yaml.safe_dump([dict({"hosts": "all", "gather_facts": False}, **play)]))
    for name, tasks in (roles or {}).items():
        (tmp_path / "roles" / name).mkdir(parents=True)
        (tmp_path / "roles" / name / "tasks.yaml").write_text(yaml.safe_dump(tasks))
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump({"all": {"hosts": {"h": {"ansible_connection": "local"}}}}))
    argv = [sys.executable, "-m", "invoke", "play", str(tmp_path / "pb.yaml"), "-i", str(tmp_path / "inv.yaml"),
            "--report", str(tmp_path / "r.json"), "--junit", str(tmp_path / "j.xml"), "-v", *extra]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    text = proc.stdout + proc.stderr
    for f in ("r.json", "j.xml"):
        if (tmp_path / f).exists():
            text += (tmp_path / f).read_text()
    return proc.returncode, text


def show(expr: str) -> dict:
    return {"name": "show", "debug": {"msg": f"value: {expr}"}}


def test_task_vars(tmp_path):
    play = {"tasks": [dict(show("{{ my_token }}"), vars={"my_token": "tok-from-task-vars"})]}
    rc, out = run_cli(tmp_path, play)
    assert rc == 0, out
    assert "value: ********" in out and "tok-from-task-vars" not in out


def test_role_params(tmp_path):
    play = {"roles": [{"role": "r", "db_password": "pw-from-role-params"}]}
    rc, out = run_cli(tmp_path, play, roles={"r": [show("{{ db_password }}")]})
    assert rc == 0, out
    assert "pw-from-role-params" not in out


def test_set_fact_named_like_a_secret(tmp_path):
    play = {"tasks": [{"name": "set", "set_fact": {"api_secret": "{{ 'sec-' ~ 'from-set-fact' }}"}},
                      show("{{ api_secret }}")]}
    rc, out = run_cli(tmp_path, play)
    assert rc == 0, out
    assert "sec-from-set-fact" not in out


def test_set_fact_derived_from_a_secret(tmp_path):
    play = {"vars": {"hf_token": "hf-derived-base"},
            "tasks": [{"name": "derive", "set_fact": {"header": "Bearer {{ hf_token | upper }}"}},
                      show("{{ header }}")]}
    rc, out = run_cli(tmp_path, play)
    assert rc == 0, out
    assert "HF-DERIVED-BASE" not in out and "hf-derived-base" not in out


def test_registered_output_that_echoes_a_secret(tmp_path):
    play = {"vars": {"vllm_api_key": "key-echoed-by-host"},
            "tasks": [{"name": "echo", "command": {"argv": ["echo", "key={{ vllm_api_key }}"]}, "register": "out"},
                      show("{{ out.stdout }}")]}
    rc, out = run_cli(tmp_path, play)
    assert rc == 0, out
    assert "key-echoed-by-host" not in out and "value: ********" in out  # the argument it echoes is masked whole


def test_numeric_secret_from_extra_vars(tmp_path):
    """-e api_key=84722197 is a JSON number: it is a secret all the same, in text and as a number."""
    play = {"tasks": [show("{{ api_key }}"), {"name": "raw", "debug": {"var": "api_key"}}]}
    rc, out = run_cli(tmp_path, play, "-e", "api_key=84722197")
    assert rc == 0, out
    assert "84722197" not in out


def test_secret_in_an_argument_error(tmp_path):
    """A wrongly typed argument's error quotes the value: not when it is a secret."""
    play = {"vars": {"admin_password": "pw-in-a-type-error"},
            "tasks": [{"name": "bad", "command": {"argv": ["true"], "timeout_s": "{{ admin_password }}"}}]}
    rc, out = run_cli(tmp_path, play)
    assert rc == 2, out
    assert "timeout_s" in out and "pw-in-a-type-error" not in out


def test_secret_in_an_undefined_variable_error(tmp_path):
    """Preflight errors (exit 4) are masked too."""
    play = {"vars": {"vault_password": "pw-in-preflight"},
            "tasks": [{"name": "bad", "debug": {"msg": "{{ vault_password }} {{ nowhere_defined }}"}}]}
    rc, out = run_cli(tmp_path, play)
    assert rc == 4, out
    assert "nowhere_defined" in out and "pw-in-preflight" not in out


@pytest.mark.parametrize("value", ["short-but-secret", 123456789, ["list-secret-1", "list-secret-2"]])
def test_every_value_type(tmp_path, value):
    play = {"tasks": [dict(show("{{ service_token }}"), vars={"service_token": value})]}
    rc, out = run_cli(tmp_path, play)
    assert rc == 0, out
    for leaf in value if isinstance(value, list) else [value]:
        assert str(leaf) not in out


def test_secret_names_and_counts():
    """Keys named like a secret are hidden even when the run knows no secret value; counts of tokens are not secrets."""
    from engine.template.secrets import Secrets, is_secret_name

    assert all(map(is_secret_name, ["hf_token", "session_token", "vllm_api_key", "db_password"]))
    assert not any(map(is_secret_name, ["smoke_tokens", "num_speculative_tokens", "tokenizer", "hf_token_file", "mask_token_id"]))
    shown = Secrets().redact_obj({"hf_token": "hf_x", "smoke_tokens": 24})
    assert shown == {"hf_token": "********", "smoke_tokens": 24}
