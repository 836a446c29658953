"""Put the target and the drafter on the host: a Hugging Face Hub id is fetched into the tool's cache.

A model variable (target_model, drafter_model) that is a Hub id (`Qwen/Qwen3.6-27B`) is fetched at its
revision (target_revision / drafter_revision: a commit, branch or tag) from hf_endpoint (the Hub or an
HF-compatible mirror) into `hf_home` (the Hugging Face cache layout: vLLM serves the snapshot with
HF_HUB_OFFLINE=1). Every file is verified against the Hub's metadata (sha256 for LFS files, the git blob
id for the others); a no-change run only stats the files (models_verify: full re-hashes). A fetch cut
short resumes; a partial file is never in the snapshot. A local path is left as it is (not fetched).

The token (hf_token, or hf_token_file on the host, read by dflash_host.host.tokens as the launch reads it)
stays in this process: it goes only into the Authorization header of requests to hf_endpoint's own origin,
never onto a command line or into a file. No server is trusted: every request has a deadline, no file is
written past its declared size, and a name the snapshot cannot hold is refused (dflash_host.models.hub_fetch).

Result: `models` ({target, drafter}: per model repo_id, source, revision, commit, path, files,
bytes_fetched, bytes_present, seconds, moved_from), `target_path`, `drafter_path`.
state absent: remove the repositories the tool fetched (its marker), never a cache the user filled.
"""

from __future__ import annotations

import os
import shutil
import time

from dflash_host.host.paths import managed_path
from dflash_host.host.tokens import read_secret
from dflash_host.models.config import is_hub_id
from dflash_host.models.hub_cache import (
    INCOMPLETE,
    MARKER,
    blob_path,
    blobs_dir,
    hub_dir,
    is_repo_name,
    is_tool_repo,
    read_ref,
    snapshot_dir,
)
from dflash_host.models.hub_client import HubClient
from dflash_host.models.hub_fetch import RepoFetch, client_for, human_bytes, patterns_of, safe_name
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "state": {"type": "str", "default": "present", "choices": ["present", "absent"],
              "help": "present: fetch and verify; absent: remove the repositories the tool fetched (teardown --purge-models)"},
    "target_model": {"type": "str", "default": None, "var": "target_model",
                     "help": "the target: a Hub id (ORG/NAME) is fetched, a local path is left as it is"},
    "target_revision": {"include": "target_revision", "default": "main", "help": "the target's commit, branch or tag"},
    "drafter_model": {"type": "str", "default": None, "var": "drafter_model",
                      "help": "the drafter: a Hub id is fetched, a local path is left as it is; null: none"},
    "drafter_revision": {"include": "drafter_revision", "default": "main", "help": "the drafter's commit, branch or tag"},
    "hf_home": {"include": "hf_home", "required": True, "help": "the Hugging Face cache the tool fills (models land in HF_HOME/hub)"},
    "hf_endpoint": {"type": "str", "default": "https://huggingface.co", "var": "hf_endpoint",
                    "help": "the Hub or an HF-compatible mirror (olah, hf-mirror, a proxy)"},
    "hf_token": {"type": "str", "default": None, "var": "hf_token",
                 "help": "token for gated or private repositories (masked; only in the request header)"},
    "hf_token_file": {"include": "hf_token_file", "help": "a file on the host holding the token"},
    "allow_patterns": {"type": "list", "default": ["*.safetensors", "*.json", "*.model", "*.tiktoken", "merges.txt",
                                                   "vocab.txt", "*.jinja"], "var": "model_allow_patterns",
                       "help": "the files fetched (fnmatch patterns); default: weights, configs, tokenizer files"},
    "ignore_patterns": {"type": "list", "default": [], "var": "model_ignore_patterns",
                        "help": "files never fetched, even when an allow pattern matches"},
    "allow_pickle": {"type": "bool", "default": False, "var": "models_allow_pickle",
                     "help": "also fetch pickled weights (*.bin, *.pt, *.pth) when the patterns match them"},
    "verify": {"type": "str", "default": "fast", "choices": ["fast", "full"], "var": "models_verify",
               "help": "fast: a file unchanged since its last check (size, mtime, inode) is not read; full: hash all"},
    "free_margin_gib": {"type": "float", "default": 1.0, "var": "models_free_margin_gib",
                        "help": "free disk kept beyond what a fetch needs, in GiB"},
    "timeout_s": {"type": "int", "default": 60, "var": "models_timeout_s",
                  "help": "seconds without an answer before a request counts as dropped; an API answer must be "
                  "whole within them"},
    "min_rate_kib": {"type": "int", "default": 256, "var": "models_min_rate_kib",
                     "help": "a file's request must be whole within models_timeout_s plus its size at this rate "
                     "(KiB/s); a slower one is cut and resumed"},
    "via": {"type": "str", "default": "host", "choices": ["host", "control_node"], "var": "models_via",
            "help": "host: each host fetches from hf_endpoint; control_node: the control node fetches each file once "
            "(into its cache) and sends it to every host over their connections (a fleet takes each file once)"},
    "source_dir": {"type": "path", "default": None, "var": "models_source_dir",
                   "help": "air-gapped: a folder ON THE CONTROL NODE holding ORG/NAME model folders, pushed to the host "
                   "(only missing or changed files)"},
    "relay_cache": {"type": "path", "default": "~/.cache/dflash-provision/hf", "var": "models_relay_cache",
                    "help": "the control node's Hugging Face cache for models_via: control_node"},
    "phase": {"type": "str", "default": "fetch", "choices": ["fetch", "plan", "install"],
              "help": "set by the control node's relay: plan (what the host lacks), install (verify what it sent)"},
    "manifests": {"type": "dict", "default": None,
                  "help": "set by the control node's relay: {target, drafter} commits and files it resolved"},
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("hf_home", "source_dir", "relay_cache", "hf_endpoint", "hf_token_file", "manifests")


def fetch_one(role: str, value, revision: str, args: dict, client: HubClient | None, ctx: Context) -> dict:
    """One model variable: a local path as it is, a Hub id fetched and verified (or, relayed by the control
    node: planned, then installed from what it uploaded)."""
    if not value:
        return {"source": None, "path": None}
    if not is_hub_id(value):
        path = os.path.expanduser(str(value))
        return {"source": "local", "path": path, "exists": os.path.exists(path)}
    if not safe_name(str(revision)):
        raise ModuleError(f"{role}_revision {revision!r} is not a commit, branch or tag name; fix {role}_revision")
    started = time.monotonic()
    job = RepoFetch(client, value, revision, args["hf_home"], patterns_of(args))
    relayed = (args["manifests"] or {}).get(role)
    if args["phase"] != "fetch":
        if not relayed:
            raise ModuleError(f"{role} {value}: the control node sent no manifest for it")
        job.use_manifest(relayed)
    else:
        job.describe()
    before = read_ref(job.repo, revision)
    job.check_present(args["verify"] == "full")
    wrong_links = job.links_wrong()
    present = sum(f["size"] for n, f in job.files.items() if n not in job.missing)
    out = {"source": client.endpoint if client else relayed.get("source"), "repo_id": value, "revision": revision, "commit": job.commit,
           "path": snapshot_dir(job.repo, job.commit), "files": len(job.files),
           "bytes_present": present, "bytes_fetched": 0, "corrupt": sorted(job.corrupt),
           "moved_from": before if before and before != job.commit else None}
    for name in out["corrupt"]:
        ctx.warn(f"{value}@{job.commit[:12]}: {name} does not match the Hub's digest; it is fetched again")
    out["changed"] = bool(job.missing or wrong_links or (before != job.commit and revision != job.commit))
    if args["phase"] == "plan":
        out["needed"] = {job.files[n]["etag"]: blob_path(job.repo, job.files[n]["etag"]) + INCOMPLETE
                         for n in job.missing}
        if out["needed"] and not ctx.check:
            job.check_disk(int(args["free_margin_gib"] * 2**30))
            os.makedirs(blobs_dir(job.repo), exist_ok=True)
    if ctx.check or not out["changed"] or args["phase"] == "plan":
        out["seconds"] = round(time.monotonic() - started, 3)
        return out
    if args["phase"] == "install":
        out["source"] = relayed.get("source", "control node")
        out["bytes_fetched"] = job.install_uploaded(out["source"]) if job.missing else 0
        job.link()
        job.records.save()
    else:
        out["bytes_fetched"] = job.bring_in(ctx, int(args["free_margin_gib"] * 2**30))
    out["seconds"] = round(time.monotonic() - started, 3)
    return out


def describe(role: str, m: dict) -> str:
    if m.get("source") == "local":
        return f"{role} {m['path']} (local path, not fetched)"
    if not m.get("repo_id"):
        return f"no {role}"
    moved = f", {m['revision']} moved from {m['moved_from'][:12]}" if m.get("moved_from") else ""
    return (f"{role} {m['repo_id']}@{m['commit'][:12]}{moved}: {m['files']} files verified, "
            f"{human_bytes(m['bytes_fetched'])} fetched, {human_bytes(m['bytes_present'])} already there")


def remove_fetched(args: dict, ctx: Context) -> dict:
    """Remove every repository under hf_home/hub that carries the tool's marker; leave the rest."""
    hub = hub_dir(os.path.expanduser(args["hf_home"]))
    removed, kept = [], []
    for name in sorted(os.listdir(hub)) if os.path.isdir(hub) else []:
        repo = os.path.join(hub, name)
        if not is_repo_name(name) or not os.path.isdir(repo) or os.path.islink(repo):
            continue
        if not is_tool_repo(repo):
            kept.append(repo)
            continue
        managed_path(repo, "hf_home repository", root=hub, root_field="hf_home/hub")
        removed.append(repo)
        if not ctx.check:
            shutil.rmtree(repo)
    for repo in kept:
        ctx.warn(f"{repo}: not fetched by this tool (no {MARKER}); kept")
    verb = "would remove" if ctx.check else "removed"
    return {"changed": bool(removed), "removed": removed, "kept": kept,
            "msg": f"{verb} {len(removed)} fetched model repositories" if removed else "no fetched model repository to remove"}


def run(args: dict, ctx: Context) -> dict:
    args["hf_home"] = managed_path(args["hf_home"], "hf_home")
    if args["state"] == "absent":
        return remove_fetched(args, ctx)
    client = None
    if args["phase"] == "fetch":
        client = client_for(args, read_secret(args["hf_token"], args["hf_token_file"], "hf_token"))
    target = fetch_one("target", args["target_model"], args["target_revision"], args, client, ctx)
    drafter = fetch_one("drafter", args["drafter_model"], args["drafter_revision"], args, client, ctx)
    changed = bool(target.pop("changed", False)) | bool(drafter.pop("changed", False))
    verb = "would fetch" if ctx.check and changed else ""
    msg = "; ".join(describe(r, m) for r, m in (("target", target), ("drafter", drafter)))
    return {"changed": changed, "msg": (verb + ": " if verb else "") + msg, "models": {"target": target, "drafter": drafter},
            "target_path": target.get("path"), "drafter_path": drafter.get("path")}


if __name__ == "__main__":
    main(ARGS, run)
