"""Where a model is on this host, and what its config.json says that more than one module needs to know.

The one place that turns a model variable (target_model, drafter_model: a local folder or file, or a
Hugging Face Hub id) into local files: `locate_model` finds the folder (the path itself, or the Hub
id's snapshot in this host's Hugging Face cache, never downloading), `config_json_path` its
config.json, `read_config_json` reads that file bounded, and `require_local` says in one sentence
what is missing. The safetensors files of a located checkpoint are `safetensors_header.read_checkpoint(path)`.
Used by drafter_config (and meant for the vLLM launch, which passes an uncached Hub id on to vLLM).
"""

from __future__ import annotations

import os
import re

from dflash_host.host.untrusted_json import load_json_file
from dflash_host.models.hub_cache import host_hub_dir, hub_dir, read_ref, repo_in, snapshot_dir, snapshot_dirs
from dflash_host.module import ModuleError

HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
MAX_CONFIG_BYTES = 16 * 2**20  # a config.json is a few KB; one with a label map a few MB
MAX_CONFIG_DEPTH = 64  # quantization_config nests ~6 deep
PATH_PREFIXES = ("/", "~", "./", "../")


def is_multimodal_target(config: dict) -> bool:
    """True when a target's config.json is a multimodal checkpoint (text fields under text_config).

    vllm-service passes --language-model-only for such targets; drafter-config reads their text fields.
    """
    return isinstance(config.get("text_config"), dict) or isinstance(config.get("vision_config"), dict)


def looks_like_path(model: str) -> bool:
    """A local folder (absolute, ~, ./) rather than a Hugging Face id such as Qwen/Qwen3-8B."""
    return model.startswith(PATH_PREFIXES) or os.path.exists(model)


def is_hub_id(value: object) -> bool:
    """A model variable naming a Hugging Face Hub repository (ORG/NAME), not a local path."""
    return isinstance(value, str) and not looks_like_path(value) and bool(HUB_ID_RE.match(value))


def hub_cache_snapshot(repo_id: str, environ: dict | None = None, hf_home: str | None = None,
                       revision: str | None = None) -> str | None:
    """The local snapshot folder of a Hugging Face Hub id, or None: first in the tool's cache (hf_home, which
    the models role fills), then in the host's own Hugging Face cache. Nothing is downloaded.

    A revision (commit, branch or tag) names its snapshot exactly; without one, refs/main, else the most
    recently modified snapshot.
    """
    env = os.environ if environ is None else environ
    if not HUB_ID_RE.match(repo_id):
        return None
    caches = [hub_dir(os.path.expanduser(hf_home))] if hf_home else []
    caches.append(host_hub_dir(env))
    for cache in caches:
        found = _snapshot_in(repo_in(cache, repo_id), revision)
        if found:
            return found
    return None


def _snapshot_in(repo: str, revision: str | None) -> str | None:
    """The snapshot a revision names in a cache's repository folder (the layout is dflash_host.models.hub_cache's)."""
    commit = revision if revision and COMMIT_RE.match(revision) else None
    if commit is None:
        commit = read_ref(repo, revision or "main")
    if commit and os.path.isdir(snapshot_dir(repo, commit)):
        return snapshot_dir(repo, commit)
    if revision:
        return None
    found = [d for d in snapshot_dirs(repo) if os.path.isdir(d)]
    return max(found, key=os.path.getmtime) if found else None


class ModelLocation:
    """A model variable's value and where its files are on this host (a plain class: dataclasses cost an
    import of inspect on every host)."""

    __slots__ = ("given", "path", "hub_id")

    def __init__(self, given: str, path: str | None, hub_id: str | None) -> None:
        self.given = given  # the value as written
        self.path = path  # the existing local file or folder (the Hub id's cached snapshot); None: not on this host
        self.hub_id = hub_id  # the value when it is no local path: vLLM may download it

    def __repr__(self) -> str:
        return f"ModelLocation(given={self.given!r}, path={self.path!r}, hub_id={self.hub_id!r})"


def locate_model(value: str, environ: dict | None = None, hf_home: str | None = None,
                 revision: str | None = None) -> ModelLocation:
    """Resolve a model folder, file or Hub id (at revision, in the tool's hf_home first) to its local files;
    looks, never raises or downloads."""
    path = os.path.expanduser(value)
    if os.path.exists(path):
        return ModelLocation(given=value, path=path, hub_id=None)
    hub_id = None if value.startswith(PATH_PREFIXES) else value
    return ModelLocation(given=value, path=hub_cache_snapshot(value, environ, hf_home, revision), hub_id=hub_id)


def config_json_path(path: str) -> str:
    """A local model's config.json: config.json in its folder, or the path itself when a file was given."""
    return os.path.join(path, "config.json") if os.path.isdir(path) else path


def require_local(location: ModelLocation, var: str, what: str) -> str:
    """The local path of a located model, or the error that says what is missing and which variable to set."""
    if location.path is not None:
        return location.path
    hint = ""
    if HUB_ID_RE.match(location.given):
        hint = (" (it looks like a Hub id, but it is not in this host's Hugging Face cache at that revision; the "
                "models role fetches it: run `invoke provision`, or check hf_endpoint and the revision)")
    raise ModuleError(f"{location.given}: no such file or folder{hint}; set {var} to the {what}")


def config_or_none(folder: str) -> dict | None:
    """A model folder's config.json as an object, or None where it has none that reads: for figures that
    have a default without it (the drafter's block size, the target's vocabulary size)."""
    try:
        return read_config_json(os.path.join(folder, "config.json"), "config.json", "")
    except ModuleError:
        return None


def read_config_json(path: str, what: str, fix: str) -> dict:
    """A model's config.json as an object; size and nesting bounded (a crafted one once raised RecursionError).

    `what` names the file in messages ("the target config"), `fix` says what to do about a missing or bad one.
    """
    try:
        data = load_json_file(path, MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH)
    except FileNotFoundError:
        raise ModuleError(f"{path}: no such file; {fix}") from None
    except ValueError as exc:
        raise ModuleError(f"{path}: {what} is not valid JSON ({exc}); {fix}") from None
    except OSError as exc:
        raise ModuleError(f"{path}: cannot read {what} ({exc.strerror})") from None
    if not isinstance(data, dict):
        raise ModuleError(f"{path}: {what} is JSON but not an object (got {type(data).__name__}); {fix}")
    return data
