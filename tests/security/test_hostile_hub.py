"""The Hub client trusts no server: the models module, role and relay against a hostile HF-compatible server.

The server is real (tests/fakes/hostile_hub.py: the Hub's API on loopback, TLS and plain HTTP on one port);
the module runs in this process as the worker runs it, the role and the relay (models_via: control_node)
through the engine on the local host. Each fault ends in one clear error naming the server and what it
sent, keeps nothing partial that cannot be right, never shows the token; a run against a good server then
converges.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dflash_host.module import Context, ModuleError, execute
from dflash_host.vllm import launch
from engine.report.console import Console
from library import models
from library.vllm_server import ARGS as VLLM_ARGS
from tests.fakes.hostile_hub import HostileHub, self_signed_cert
from tests.fakes.hub import FETCH
from tests.helpers import play_roles

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_dfpHostileToken0123456789"
CONFIG = b'{"architectures": ["Qwen3ForCausalLM"]}'
FILES = {"config.json": CONFIG, "model.safetensors": os.urandom(40_000), "tokenizer.json": b'{"v": 1}'}


@pytest.fixture(scope="session")
def cert(tmp_path_factory):
    return self_signed_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def hub(cert, monkeypatch):
    """A hostile hub serving dfp/model (FILES); its certificate trusted by this process and the ones it starts."""
    monkeypatch.setenv("SSL_CERT_FILE", str(cert[0]))
    server = HostileHub(cert=cert)
    server.publish("dfp/model", FILES)
    yield server
    server.stop()


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs at tmp_path/disk: a server streaming without end fills it in a blink."""
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {exc}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def call(args: dict) -> dict:
    """The models module as the worker runs it; its result as JSON would carry it."""
    result = execute(models.ARGS, models.run, dict({"drafter_model": None, "target_model": "dfp/model",
                                                    "free_margin_gib": 0.0}, **args), Context(), "models")
    return json.loads(json.dumps(result))


def run_role(tmp_path: Path, inventory_file, endpoint: str, **more) -> tuple:
    """The models role through the engine on the local host: (result, console + JSON report + JUnit text)."""
    inv = inventory_file(local=True, vars={"dfp_root": str(tmp_path / "root"), "hf_endpoint": endpoint,
                                           "target_model": "dfp/model", "drafter_model": None,
                                           "models_free_margin_gib": 0, "models_relay_cache": str(tmp_path / "relay"),
                                           **more})
    buf = io.StringIO()
    res = play_roles(tmp_path, inv, ["models"], report=str(tmp_path / "r.json"), junit=str(tmp_path / "j.xml"),
                     console=Console(verbose=3, stream=buf))
    text = buf.getvalue() + "".join((tmp_path / f).read_text() for f in ("r.json", "j.xml") if (tmp_path / f).exists())
    return res, text


def fetch_msg(res) -> str:
    return res.find(FETCH, "local")[0].msg


def leftovers(root: Path) -> list:
    """Partial or blob files under a cache: what a failed fetch left."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("blobs/*")) if root.exists() else []


def converges(hub: HostileHub, args: dict) -> None:
    """A good server again: the run fetches, verifies, and a second one changes nothing."""
    hub.heal()
    first = call(args)
    assert not first["failed"], first["msg"]
    assert not call(args)["changed"]


# --------------------------------------------------------------------------- more bytes than declared

@pytest.mark.parametrize("announced", [False, True], ids=["endless", "content-length"])
def test_a_server_sending_more_than_the_declared_size_is_stopped_there_and_nothing_kept(hub, small_disk, announced):
    hf = small_disk / "hf"
    hub.oversize("config.json", extra=None if not announced else 4 * 2**20, content_length=announced)
    res = call({"hf_home": str(hf), "hf_endpoint": hub.endpoint})
    assert res["failed"], res
    msg = res["msg"]
    assert hub.endpoint in msg and "'config.json'" in msg and f"longer than the {len(CONFIG)} bytes" in msg, msg
    assert "partial file was removed" in msg and "resumes" not in msg and "Traceback" not in msg
    assert not [p for p in leftovers(hf) if p.endswith(".incomplete")], leftovers(hf)
    assert os.statvfs(small_disk).f_bavail > 0  # the disk was never filled
    converges(hub, {"hf_home": str(hf), "hf_endpoint": hub.endpoint})


def test_the_relay_stops_a_server_sending_more_than_declared_and_keeps_nothing(hub, small_disk, tmp_path, inventory_file):
    hub.oversize("config.json", extra=None)
    res, text = run_role(tmp_path, inventory_file, hub.endpoint, models_via="control_node",
                         models_relay_cache=str(small_disk / "relay"))
    assert res.exit_code == 2, text
    msg = fetch_msg(res)
    assert "on the control node" in msg and hub.endpoint in msg and "longer than the" in msg, msg
    assert not [p for p in leftovers(small_disk / "relay") if p.endswith(".incomplete")]
    assert os.statvfs(small_disk).f_bavail > 0
    hub.heal()
    again, text = run_role(tmp_path, inventory_file, hub.endpoint, models_via="control_node",
                           models_relay_cache=str(small_disk / "relay"))
    assert again.exit_code == 0, text


def test_a_resume_answered_from_another_byte_is_not_appended_and_the_file_starts_again(hub, tmp_path):
    """A partial file (a fetch cut short) and a server whose 206 starts elsewhere than asked: its bytes would
    follow the wrong ones; the partial goes and the file is fetched whole."""
    hf = tmp_path / "hf"
    weights = FILES["model.safetensors"]
    blobs = hf / "hub" / "models--dfp--model" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / (hashlib.sha256(weights).hexdigest() + ".incomplete")).write_bytes(weights[:1000])
    hub.misrange("model.safetensors")
    res = call({"hf_home": str(hf), "hf_endpoint": hub.endpoint})
    assert not res["failed"], res["msg"]
    assert (Path(res["target_path"]) / "model.safetensors").read_bytes() == weights
    assert [s.headers.get("Range") for s in hub.seen if s.kind == "resolve" and "safetensors" in s.path] == ["bytes=1000-", None]


# --------------------------------------------------------------------------- the token

@pytest.mark.parametrize("via", ["host", "control_node"])
def test_a_token_file_of_two_lines_is_one_error_and_the_token_is_shown_nowhere(hub, tmp_path, inventory_file, via):
    hub.require_token(TOKEN)
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\nsecond-line\n")
    res, text = run_role(tmp_path, inventory_file, hub.endpoint, hf_token_file=str(token_file), models_via=via)
    assert res.exit_code == 2, text
    msg = fetch_msg(res)
    assert f"hf_token_file {token_file} holds 2 lines" in msg and "crashed" not in msg, msg
    assert TOKEN not in text and "Bearer" not in text and "second-line" not in text
    assert hub.auth_seen() == []  # refused before any request
    token_file.write_text(f"  {TOKEN}\r\n")  # whitespace around it is no fault
    ok, text = run_role(tmp_path, inventory_file, hub.endpoint, hf_token_file=str(token_file), models_via=via)
    assert ok.exit_code == 0, text
    assert TOKEN not in text and set(hub.auth_seen()) == {f"Bearer {TOKEN}"}


@pytest.mark.parametrize("content, problem", [
    (f"{TOKEN}\nsecond-line\n", "holds 2 lines"), (f"{TOKEN} trailing", "contains a space"),
    (f"{TOKEN}\x1b[2J", "contains the control character U+001B"), ("\n\n", "is empty")])
def test_every_consumer_reads_a_token_file_by_one_rule(hub, tmp_path, content, problem):
    """The host's fetch, the vLLM launch (hf_token_file, vllm_api_key_file) refuse the same file alike."""
    bad = tmp_path / "bad"
    bad.write_text(content)
    fetched = call({"hf_home": str(tmp_path / "hf"), "hf_endpoint": hub.endpoint, "hf_token_file": str(bad)})
    assert fetched["failed"] and problem in fetched["msg"] and TOKEN not in fetched["msg"], fetched["msg"]
    target, drafter = tmp_path / "target", tmp_path / "dflash"
    for folder, arch in ((target, "Qwen3ForCausalLM"), (drafter, "DFlashDraftModel")):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"architectures": [arch]}))
    base = {"venv_python": "/env/bin/python", "target_model": str(target), "drafter_model": str(drafter),
            "served_model_name": "target", "host": "127.0.0.1", "port": 8011, "flavor": "cuda",
            "num_speculative_tokens": 3, "speculative_method": "dflash"}
    for key, var in (("hf_token_file", "hf_token_file"), ("api_key_file", "vllm_api_key_file")):
        with pytest.raises(ModuleError) as err:
            launch.resolve(dict(base, **{key: str(bad)}), None, VLLM_ARGS)
        assert f"{var} {bad} {problem}" in err.value.msg and TOKEN not in err.value.msg
    good = tmp_path / "good"
    good.write_text(f"\ufeff {TOKEN}\r\n")
    assert launch.resolve(dict(base, api_key_file=str(good)), None, VLLM_ARGS)["env"]["VLLM_API_KEY"] == TOKEN
    hub.require_token(TOKEN)
    assert not call({"hf_home": str(tmp_path / "hf"), "hf_endpoint": hub.endpoint, "hf_token_file": str(good)})["failed"]
    assert set(hub.auth_seen()) - {None} == {f"Bearer {TOKEN}"}


# --------------------------------------------------------------------------- redirects and the Authorization header

@pytest.mark.parametrize("change", ["scheme", "port", "host"])
def test_the_token_is_not_sent_after_a_change_of_scheme_host_or_port(hub, cert, tmp_path, change):
    other = HostileHub(cert=cert)
    other.publish("dfp/model", FILES)
    try:
        endpoint, to = {"scheme": (hub.https_endpoint, hub.endpoint),  # https -> http, same host and port
                        "port": (hub.endpoint, other.endpoint),
                        "host": (hub.endpoint, f"http://localhost:{hub.port}")}[change]
        hub.redirect("resolve", to)
        res = call({"hf_home": str(tmp_path / "hf"), "hf_endpoint": endpoint, "hf_token": TOKEN})
        assert not res["failed"], res["msg"]
        both = hub.seen + other.seen
        at_endpoint = [s for s in both if (s.scheme, s.headers.get("Host")) == (endpoint.split(":")[0], endpoint.split("//")[1])]
        redirected = [s for s in both if s not in at_endpoint]
        assert {s.kind for s in at_endpoint} == {"revision", "paths-info", "resolve"}
        assert all(s.headers.get("Authorization") == f"Bearer {TOKEN}" for s in at_endpoint)
        assert redirected and {s.kind for s in redirected} == {"resolve"}
        assert [s.headers.get("Authorization") for s in redirected] == [None] * len(redirected), change
    finally:
        other.stop()


def test_a_redirect_to_another_scheme_than_http_is_refused_by_name(hub, tmp_path):
    hub.redirect("revision", "ftp://127.0.0.1:21")
    res = call({"hf_home": str(tmp_path / "hf"), "hf_endpoint": hub.endpoint, "hf_token": TOKEN})
    assert res["failed"] and "ftp://127.0.0.1:21" in res["msg"] and "only http and https" in res["msg"], res["msg"]
    converges(hub, {"hf_home": str(tmp_path / "hf"), "hf_endpoint": hub.endpoint})


# --------------------------------------------------------------------------- a server that trickles

@pytest.mark.parametrize("kind, part", [("revision", "all"), ("paths-info", "body"), ("resolve", "all")])
def test_a_trickling_server_is_stopped_by_each_requests_deadline(hub, tmp_path, kind, part):
    """The module as a process (python -m library.models): before the deadline, it ran for minutes."""
    hub.trickle(kind, part)
    args = {"target_model": "dfp/model", "drafter_model": None, "hf_home": str(tmp_path / "hf"),
            "hf_endpoint": hub.endpoint, "timeout_s": 2, "free_margin_gib": 0.0}
    (tmp_path / "args.json").write_text(json.dumps(args))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "library.models", str(tmp_path / "args.json")], cwd=ROOT,
                          capture_output=True, text=True, timeout=90)
    took = time.monotonic() - started
    res = json.loads(proc.stdout)
    assert res["failed"] and took < 30, (took, res)
    assert hub.endpoint in res["msg"] and "did not arrive within 2 s" in res["msg"] and "models_timeout_s" in res["msg"]
    assert "Traceback" not in proc.stdout + proc.stderr
    converges(hub, dict(args, timeout_s=60))


def test_the_roles_tasks_carry_a_timeout_and_a_trickle_ends_the_role_in_time(hub, tmp_path, inventory_file):
    tasks = yaml.safe_load((ROOT / "roles" / "models" / "tasks.yaml").read_text())
    assert tasks and all(isinstance(t.get("timeout"), (int, float)) for t in tasks), tasks
    hub.trickle("revision")
    started = time.monotonic()
    res, text = run_role(tmp_path, inventory_file, hub.endpoint, models_timeout_s=2)
    assert res.exit_code == 2 and time.monotonic() - started < 30, text
    assert "did not arrive within 2 s" in fetch_msg(res)
    hub.heal()
    assert run_role(tmp_path, inventory_file, hub.endpoint, models_timeout_s=2)[0].exit_code == 0


# --------------------------------------------------------------------------- names

@pytest.mark.parametrize("files, shown", [
    ({"a\x1b[2J.json": b"{}"}, "'a\\x1b[2J.json'"),
    ({"evil\nok: [h9].json": b"{}"}, "'evil\\nok: [h9].json'"),
    ({"x" * 300 + ".json": b"{}"}, "has a part of 305 bytes"),
    ({"a.json": b"{}", "a.json/b.json": b"{}"}, "'a.json', which is a file, and a folder holding 'a.json/b.json'")],
    ids=["escape", "newline", "300-bytes", "file-and-folder"])
def test_a_name_the_snapshot_cannot_hold_is_one_clear_error(hub, tmp_path, files, shown):
    hub.publish("dfp/model", dict(FILES, **files))
    hf = tmp_path / "hf"
    res = call({"hf_home": str(hf), "hf_endpoint": hub.endpoint})
    assert res["failed"], res
    assert shown in res["msg"] and hub.endpoint in res["msg"] and "Nothing was fetched" in res["msg"], res["msg"]
    assert "\x1b" not in res["msg"] and "\n" not in res["msg"]
    assert leftovers(hf) == []
    hub.publish("dfp/model", FILES)
    converges(hub, {"hf_home": str(hf), "hf_endpoint": hub.endpoint})


def test_the_role_shows_a_bad_name_as_one_error_not_a_crash(hub, tmp_path, inventory_file):
    hub.publish("dfp/model", dict(FILES, **{"a.json": b"{}", "a.json/b.json": b"{}"}))
    res, text = run_role(tmp_path, inventory_file, hub.endpoint)
    assert res.exit_code == 2 and "crashed" not in text and "Traceback" not in text, text
    assert "is a file, and a folder holding" in fetch_msg(res)


# --------------------------------------------------------------------------- the air-gapped source folder

def source_folder(tmp_path: Path) -> Path:
    repo = tmp_path / "models" / "dfp" / "model"
    repo.mkdir(parents=True)
    for name, data in FILES.items():
        (repo / name).write_bytes(data)
    return repo


def test_a_source_dir_symlink_out_of_the_folder_is_refused(tmp_path, inventory_file):
    repo = source_folder(tmp_path)
    outside = tmp_path / "private.json"
    outside.write_text('{"secret": "control-node-only"}')
    (repo / "extra.json").symlink_to(outside)
    (repo / "inside.json").symlink_to(repo / "config.json")  # a link within the folder is fine
    res, text = run_role(tmp_path, inventory_file, "http://127.0.0.1:9", models_source_dir=str(tmp_path / "models"))
    assert res.exit_code == 2, text
    msg = fetch_msg(res)
    assert f"{repo / 'extra.json'} is a symlink to {outside}" in msg and "Nothing was sent" in msg, msg
    for path in (tmp_path / "root").rglob("*"):
        assert not path.is_file() or b"control-node-only" not in path.read_bytes(), path
    (repo / "extra.json").unlink()
    ok, text = run_role(tmp_path, inventory_file, "http://127.0.0.1:9", models_source_dir=str(tmp_path / "models"))
    assert ok.exit_code == 0, text
    snap = Path(ok.find(FETCH, "local")[0].result["target_path"])
    assert (snap / "inside.json").read_bytes() == CONFIG


def test_pushed_files_keep_their_source_mode_bits(tmp_path, inventory_file):
    repo = source_folder(tmp_path)
    os.chmod(repo / "model.safetensors", 0o600)
    os.chmod(repo / "tokenizer.json", 0o640)
    res, text = run_role(tmp_path, inventory_file, "http://127.0.0.1:9", models_source_dir=str(tmp_path / "models"))
    assert res.exit_code == 0, text
    snap = Path(res.find(FETCH, "local")[0].result["target_path"])
    modes = {name: os.stat(snap / name).st_mode & 0o777 for name in FILES}
    assert modes == {"config.json": os.stat(repo / "config.json").st_mode & 0o777, "model.safetensors": 0o600,
                     "tokenizer.json": 0o640}, modes


def test_a_source_dir_name_with_a_control_character_is_one_clear_error(tmp_path, inventory_file):
    repo = source_folder(tmp_path)
    (repo / "bad\tname.json").write_text("{}")
    res, text = run_role(tmp_path, inventory_file, "http://127.0.0.1:9", models_source_dir=str(tmp_path / "models"))
    assert res.exit_code == 2 and "crashed" not in text, text
    assert "'bad\\tname.json'" in fetch_msg(res) and "U+0009" in fetch_msg(res)
