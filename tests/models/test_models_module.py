"""The models module against a real HF-compatible server (olah on loopback) and the real huggingface_hub.

Fetched, verified, resumable, refusing what it should before any byte; the token only in the request.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_host.models import hub_cache
from dflash_host.module import Context, execute
from library import models
from tests.fakes.hub import Gate

ROOT = Path(__file__).resolve().parents[2]
WEIGHTS = os.urandom(300_000)


def call(args: dict, check: bool = False) -> dict:
    ctx_lines: list = []
    result = execute(models.ARGS, models.run, dict({"drafter_model": None}, **args),
                     Context(check=check, progress=ctx_lines.append), "models")
    json.dumps(result)
    result["said"] = ctx_lines
    return result


def repo_files(tag: str) -> dict:
    return {"config.json": json.dumps({"architectures": ["Qwen3ForCausalLM"], "tag": tag}).encode(),
            "model.safetensors": WEIGHTS + tag.encode(), "tokenizer.json": b'{"version": "1.0"}',
            "pytorch_model.bin": b"pickle", "README.md": b"# card\n"}


@pytest.fixture
def repo(hub, request):
    """A fresh repository on the hub for this test: (repo_id, first commit)."""
    repo_id = f"dfp/{request.node.name.replace('[', '-').replace(']', '')[:60]}"
    return repo_id, hub.publish(repo_id, repo_files("v1"))


def target(result: dict) -> dict:
    return result["models"]["target"]


def test_a_hub_id_is_fetched_verified_and_a_second_run_reads_no_weights(hub, repo, tmp_path):
    repo_id, commit = repo
    args = {"target_model": repo_id, "hf_home": str(tmp_path / "hf"), "hf_endpoint": hub.endpoint}
    first = call(args)
    assert not first["failed"] and first["changed"], first["msg"]
    got = target(first)
    assert got["commit"] == commit and got["files"] == 3 and got["bytes_fetched"] == sum(
        len(v) for k, v in repo_files("v1").items() if k.endswith((".json", ".safetensors")))
    snap = Path(got["path"])
    assert sorted(p.name for p in snap.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]  # no pickle, no card
    assert (snap / "model.safetensors").read_bytes() == WEIGHTS + b"v1"
    assert (snap / "model.safetensors").is_symlink()
    # the cache is a Hugging Face cache: huggingface_hub resolves it offline
    out = subprocess.run([sys.executable, "-c", f"from huggingface_hub import snapshot_download; print(snapshot_download({repo_id!r}))"],
                         env=dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1"), capture_output=True, text=True)
    assert out.stdout.strip() == str(snap), out.stderr

    served = hub.served(repo_id)
    again = call(args)
    assert not again["failed"] and not again["changed"], again["msg"]
    assert target(again)["bytes_fetched"] == 0 and target(again)["bytes_present"] == got["bytes_fetched"]
    assert hub.served(repo_id) == served  # nothing downloaded again


def test_a_pinned_commit_needs_no_server_on_a_no_change_run(hub, repo, tmp_path):
    repo_id, commit = repo
    gate = Gate(hub.endpoint)
    try:
        args = {"target_model": repo_id, "target_revision": commit, "hf_home": str(tmp_path / "hf"), "hf_endpoint": gate.endpoint}
        assert call(args)["changed"]
        asked = len(gate.paths)
        again = call(args)
        assert not again["changed"] and len(gate.paths) == asked, gate.paths[asked:]
    finally:
        gate.stop()


def test_a_corrupted_file_is_found_named_and_fetched_again(hub, repo, tmp_path):
    repo_id, _ = repo
    args = {"target_model": repo_id, "hf_home": str(tmp_path / "hf"), "hf_endpoint": hub.endpoint}
    snap = Path(target(call(args))["path"])
    weights = snap / "model.safetensors"
    blob = Path(os.path.realpath(weights))
    with open(blob, "r+b") as fh:  # one flipped byte, same size
        fh.seek(1000)
        fh.write(bytes([WEIGHTS[1000] ^ 0xFF]))
    res = call(args)
    assert not res["failed"] and res["changed"], res["msg"]
    assert target(res)["corrupt"] == ["model.safetensors"]
    assert any("model.safetensors" in w and "digest" in w for w in res["warnings"])
    assert weights.read_bytes() == WEIGHTS + b"v1"


def test_full_verification_finds_a_corruption_that_kept_size_and_mtime(hub, repo, tmp_path):
    repo_id, _ = repo
    args = {"target_model": repo_id, "hf_home": str(tmp_path / "hf"), "hf_endpoint": hub.endpoint}
    blob = Path(os.path.realpath(Path(target(call(args))["path"]) / "model.safetensors"))
    st = blob.stat()
    with open(blob, "r+b") as fh:
        fh.write(b"X")
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))  # the fast check cannot see it...
    assert not call(args)["changed"]
    res = call(dict(args, verify="full"))  # ...the full one does
    assert res["changed"] and target(res)["corrupt"] == ["model.safetensors"]
    assert blob.read_bytes() == WEIGHTS + b"v1"


def big_partial(blobs: Path) -> Path | None:
    """The partial blob past 1 MiB, if any: the small file's own .incomplete may be renamed away while looked at."""
    for path in blobs.glob("*.incomplete"):
        try:
            if path.stat().st_size > 2**20:
                return path
        except FileNotFoundError:
            continue
    return None


def test_a_fetch_killed_mid_file_resumes_without_fetching_complete_files_again(hub, tmp_path):
    repo_id = "dfp/resume"
    big = os.urandom(3 * 2**20)
    hub.publish(repo_id, {"a-config.json": b'{"a": 1}', "b-model.safetensors": big})
    gate = Gate(hub.endpoint, rate=512 * 1024)  # about 6 s for the big file
    hf = tmp_path / "hf"
    args = {"target_model": repo_id, "drafter_model": None, "hf_home": str(hf), "hf_endpoint": gate.endpoint}
    (tmp_path / "args.json").write_text(json.dumps(args))
    proc = subprocess.Popen([sys.executable, "-m", "library.models", str(tmp_path / "args.json")], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        partial = None
        while time.monotonic() < deadline:
            partial = big_partial(hf / "hub" / "models--dfp--resume" / "blobs")
            if partial:
                break
            time.sleep(0.05)
        assert partial is not None, "the fetch never started the big file"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    kept = partial.stat().st_size
    assert kept < len(big)
    snap = next((hf / "hub" / "models--dfp--resume" / "snapshots").glob("*"), None)
    assert snap is None or not (snap / "b-model.safetensors").exists()  # a partial file is never in the snapshot

    gate.rate = None
    before = list(gate.paths)
    res = call(args)
    assert not res["failed"], res["msg"]
    fetched_again = [p for p in gate.paths[len(before):] if "/resolve/" in p]
    assert fetched_again == [p for p in fetched_again if "b-model.safetensors" in p]  # the complete file is not fetched again
    assert target(res)["bytes_fetched"] == len(big) - kept  # resumed where it stopped (Range)
    assert (Path(target(res)["path"]) / "b-model.safetensors").read_bytes() == big
    gate.stop()


def test_not_enough_disk_is_refused_before_any_byte(hub, repo, tmp_path):
    repo_id, _ = repo
    served = hub.served(repo_id)
    res = call({"target_model": repo_id, "hf_home": str(tmp_path / "hf"), "hf_endpoint": hub.endpoint,
                "free_margin_gib": 2.0**40})
    assert res["failed"] and "not enough free disk" in res["msg"] and "hf_home" in res["msg"] and "Nothing was fetched" in res["msg"]
    assert hub.served(repo_id) == served
    assert not list((tmp_path / "hf").rglob("blobs/*"))


@pytest.mark.parametrize("kind", ["repo", "revision"])
def test_a_bad_repo_id_or_revision_is_named_with_the_fix(hub, repo, tmp_path, kind):
    repo_id, _ = repo
    args = {"target_model": repo_id if kind == "revision" else "dfp/no-such-model", "hf_home": str(tmp_path / "hf"),
            "hf_endpoint": hub.endpoint, "target_revision": "no-such-branch" if kind == "revision" else "main"}
    res = call(args)
    assert res["failed"], res
    if kind == "repo":
        assert "dfp/no-such-model" in res["msg"] and "check the id" in res["msg"]
    else:
        assert "no-such-branch" in res["msg"] and ("target_revision" in res["msg"] or "check the id" in res["msg"])
    assert "Traceback" not in res["msg"]


def test_a_branch_that_moves_changes_the_host_in_the_run_that_says_so(hub, repo, tmp_path):
    repo_id, first_commit = repo
    args = {"target_model": repo_id, "hf_home": str(tmp_path / "hf"), "hf_endpoint": hub.endpoint}
    first = target(call(args))
    moved = hub.publish(repo_id, {"config.json": json.dumps({"architectures": ["Qwen3ForCausalLM"], "tag": "v2"}).encode()})
    res = call(args)
    assert res["changed"] and target(res)["commit"] == moved and target(res)["moved_from"] == first_commit
    assert "moved from" in res["msg"]
    assert target(res)["bytes_fetched"] < 100  # only the changed config; the weights' blob is shared
    assert json.loads((Path(target(res)["path"]) / "config.json").read_text())["tag"] == "v2"
    assert Path(first["path"]).is_dir()  # the old snapshot stays for a pinned host
    assert not call(args)["changed"]
    pinned = call(dict(args, target_revision=first_commit))
    assert not pinned["changed"] and target(pinned)["path"] == first["path"]


def test_pickled_weights_only_when_asked(hub, repo, tmp_path):
    repo_id, _ = repo
    args = {"target_model": repo_id, "hf_home": str(tmp_path / "hf"), "hf_endpoint": hub.endpoint, "allow_patterns": ["*"]}
    assert "pytorch_model.bin" not in os.listdir(target(call(args))["path"])
    got = target(call(dict(args, allow_pickle=True)))
    assert "pytorch_model.bin" in os.listdir(got["path"]) and "README.md" in os.listdir(got["path"])


def test_check_mode_says_what_it_would_fetch_and_writes_nothing(hub, repo, tmp_path):
    repo_id, _ = repo
    res = call({"target_model": repo_id, "hf_home": str(tmp_path / "hf"), "hf_endpoint": hub.endpoint}, check=True)
    assert res["changed"] and "would fetch" in res["msg"]
    assert not (tmp_path / "hf").exists() or not list((tmp_path / "hf").rglob("*"))


def test_a_gated_repository_needs_the_token_which_goes_only_into_the_request(hub, repo, tmp_path):
    repo_id, _ = repo
    token = "hf_dfpGatedToken0123456789"
    gate = Gate(hub.endpoint, token=token)
    hf = tmp_path / "hf"
    try:
        refused = call({"target_model": repo_id, "hf_home": str(hf), "hf_endpoint": gate.endpoint})
        assert refused["failed"] and "gated" in refused["msg"] and "hf_token" in refused["msg"], refused["msg"]
        wrong = call({"target_model": repo_id, "hf_home": str(hf), "hf_endpoint": gate.endpoint, "hf_token": "hf_wrong"})
        assert wrong["failed"] and "refused" in wrong["msg"]
        token_file = tmp_path / "token"
        token_file.write_text(token + "\n")
        ok = call({"target_model": repo_id, "hf_home": str(hf), "hf_endpoint": gate.endpoint, "hf_token_file": str(token_file)})
        assert not ok["failed"], ok["msg"]
        assert f"Bearer {token}" in gate.auth_seen  # what the client sent
        assert token not in json.dumps(ok)
        for path in hf.rglob("*"):
            if path.is_file():
                assert token.encode() not in path.read_bytes(), path
    finally:
        gate.stop()


def test_teardown_purge_models_removes_only_what_the_tool_fetched(hub, repo, tmp_path):
    repo_id, _ = repo
    hf = tmp_path / "hf"
    call({"target_model": repo_id, "hf_home": str(hf), "hf_endpoint": hub.endpoint})
    users = hf / "hub" / "models--someone--own"
    (users / "snapshots" / "abc").mkdir(parents=True)
    res = call({"state": "absent", "hf_home": str(hf)})
    assert res["changed"] and res["removed"] == [hub_cache.repo_dir(str(hf), repo_id)]
    assert users.is_dir() and any("someone--own" in w for w in res["warnings"])
    assert not call({"state": "absent", "hf_home": str(hf)})["changed"]
