"""One reader per kind of JSON (docs/ARCHITECTURE.md says "the one reader"): this keeps it true.

The tool's own records (pidfile, launch/running records, markers, journals, the speed record) are read only
through dflash_host.host.files (load_json / read_json); a model's config.json only through
dflash_host.models.config.read_config_json; JSON nobody on the host wrote only through
dflash_host.host.untrusted_json. Any other JSON decode in the host package or a task module must be listed
here with what it decodes, so that a new reader is a decision, not an accident.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DECODERS = {"json.load", "json.loads", "load_json", "load_json_file", "loads_untrusted", "read_config_json"}

# (file, function, decoder): what it decodes. Everything here is either a reader itself or not a file at all.
ALLOWED = {
    ("dflash_host/host/files.py", "load_json", "json.loads"): "the reader of the tool's records",
    ("dflash_host/host/files.py", "read_json", "load_json"): "its tolerant form (None: not ours)",
    ("dflash_host/host/processes.py", "read_pidfile", "load_json"): "the pidfile, which says why it is garbage",
    ("dflash_host/host/untrusted_json.py", "loads_untrusted", "json.loads"): "the bounded reader of foreign JSON",
    ("dflash_host/host/untrusted_json.py", "load_json_file", "loads_untrusted"): "its file form",
    ("dflash_host/models/config.py", "read_config_json", "load_json_file"): "the one config.json reader",
    ("dflash_host/models/config.py", "config_or_none", "read_config_json"): "its tolerant form",
    ("dflash_host/vllm/launch.py", "read_model_config", "read_config_json"): "the launch's models",
    ("library/drafter_config.py", "read_existing", "read_config_json"): "the drafter's config",
    ("library/drafter_config.py", "read_target", "read_config_json"): "the target's config",
    ("library/drafter_config.py", "build_config", "json.loads"): "a deep copy of a dict (json.loads(json.dumps(..)))",
    ("dflash_host/models/safetensors_header.py", "_parse_header", "loads_untrusted"): "a checkpoint's header bytes",
    ("dflash_host/models/safetensors_header.py", "_from_index", "load_json_file"): "a checkpoint's index file",
    ("dflash_host/models/drafter_choices.py", "parse_layer_ids", "json.loads"): "a variable's text value",
    ("dflash_host/models/hub_client.py", "_json", "json.loads"): "an HTTP answer of the Hub",
    ("dflash_host/vllm/probe.py", "json", "json.loads"): "an HTTP answer of vLLM",
    ("dflash_host/speed/load_client.py", "_events", "json.loads"): "a streamed completion event",
    ("dflash_host/speed/bench_serve.py", "run_level", "json.load"): "vllm bench serve's result, in a folder of our own",
    ("dflash_host/vllm/features.py", "vllm_facts", "json.loads"): "a probe's stdout line",
    ("dflash_host/speed/bench_process.py", "_reply", "json.loads"): "the resident vllm bench serve's reply line",
    ("dflash_host/speed/workload.py", "parse_prompts", "json.loads"): "a line of the operator's prompts (checked)",
    ("dflash_host/env/build.py", "python_info", "json.loads"): "a probe's stdout line",
    ("dflash_host/env/interpreter.py", "probe_env", "json.loads"): "a probe's stdout line",
    ("dflash_host/env/interpreter.py", "run_python", "json.loads"): "a check script's stdout line",
    ("dflash_host/env/interpreter.py", "freeze_env", "json.loads"): "a probe's stdout line",
    ("dflash_host/module.py", "main", "json.load"): "the task's arguments file (the module contract)",
    ("library/tiny_models.py", "generate", "json.loads"): "the generator's stdout line",
    ("library/uri.py", "decoded_body", "json.loads"): "an HTTP answer the task asked for",
    ("dflash_host/ansible_compat/ansible/module_utils/basic.py", "_load_params", "json.loads"):
        "a playbook's own module's arguments file (Ansible's module protocol)",
    ("dflash_host/ansible_compat/ansible/module_utils/_params.py", "_to_dict", "json.loads"):
        "a dict argument written as JSON text (AnsibleModule's type dict)",
}


def _decoder(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        name = f"{f.value.id}.{f.attr}"
    elif isinstance(f, ast.Name):
        name = f.id
    else:
        return None
    return name if name in DECODERS else None


def decodes() -> set:
    found = set()
    files = sorted((ROOT / "dflash_host").rglob("*.py")) + sorted((ROOT / "library").glob("*.py"))
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Call) and _decoder(node):
                        found.add((rel, fn.name, _decoder(node)))
    return found


def test_json_is_decoded_only_by_its_reader_or_a_listed_non_record():
    unlisted = sorted(decodes() - set(ALLOWED))
    assert not unlisted, (
        "JSON decoded outside its reader (records: dflash_host.host.files.read_json/load_json; config.json: "
        f"dflash_host.models.config.read_config_json), or list it in ALLOWED with what it decodes: {unlisted}"
    )


def test_the_list_names_only_places_that_exist():
    stale = sorted(set(ALLOWED) - decodes())
    assert not stale, f"ALLOWED names decodes that are gone; drop them: {stale}"


# --------------------------------------------------------------------------- the launch record: one reader, one rule

# What reads a file (or decodes what was read); a call of one of these whose argument names the launch record
# (`p["launch"]`, a NAME.launch.json, a launch_file / launch_path) is a read of it.
FILE_READERS = DECODERS | {"read_json", "read_bytes", "open", "read_text", "read_launch"}
LAUNCH_READER = ("dflash_host/vllm/records.py", "read_launch")


def _call_name(call: ast.Call) -> str | None:
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f"{f.value.id}.{f.attr}" in DECODERS:
        return f"{f.value.id}.{f.attr}"
    return name


def _names_the_launch_record(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            if sub.value == "launch" or sub.value.endswith(".launch.json"):
                return True
        ident = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else ""
        if "launch_file" in ident or "launch_path" in ident:
            return True
    return False


def _functions(tree: ast.AST):
    """(function name, node) of every function, the innermost one owning each call (module level: '<module>')."""
    owner: dict = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                owner[id(node)] = fn.name  # inner functions are walked later and win
    return owner


def host_files(root: Path = ROOT) -> list:
    return sorted((root / "dflash_host").rglob("*.py")) + sorted((root / "library").glob("*.py"))


def raw_launch_reads(root: Path = ROOT) -> list:
    """(file, function, reader) of every read of a launch record that does not go through read_launch."""
    found = []
    for path in host_files(root):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text())
        owner = _functions(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or _call_name(node) not in FILE_READERS - {"read_launch"}:
                continue
            if any(_names_the_launch_record(a) for a in [*node.args, *(k.value for k in node.keywords)]):
                where = (rel, owner.get(id(node), "<module>"))
                if where != LAUNCH_READER:
                    found.append((*where, _call_name(node)))
    return sorted(found)


def test_the_launch_record_is_read_only_by_read_launch():
    """NAME.launch.json (the configured server's, a measurement server's) is read by one function with one rule:
    dflash_host.vllm.records.read_launch (the tool's record, or None: missing, garbage and not ours alike)."""
    raw = raw_launch_reads()
    assert not raw, f"the launch record read raw; call dflash_host.vllm.records.read_launch (the front's read_launch): {raw}"


# --------------------------------------------------------------------------- the Hugging Face cache's layout: one owner

# HF_HOME/hub/models--ORG--NAME/{blobs,snapshots/COMMIT,refs/BRANCH}: spelled in dflash_host/models/hub_cache.py only.
HF_CACHE_OWNER = "dflash_host/models/hub_cache.py"
HF_LAYOUT = re.compile(r"models--|^(hub|blobs|snapshots|refs)$|(^|/)(blobs|snapshots|refs)/")


def _docstrings(tree: ast.AST) -> set:
    """ids of string statements (docstrings and their like): prose, not paths."""
    return {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}


def hf_layout_spellings(root: Path = ROOT) -> list:
    """(file, line, text) of every string in code (host package, task modules) or roles that spells a part of
    the Hugging Face cache's layout outside its owner."""
    found = []
    for path in host_files(root):
        rel = path.relative_to(root).as_posix()
        if rel == HF_CACHE_OWNER:
            continue
        tree = ast.parse(path.read_text())
        prose = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
                if HF_LAYOUT.search(node.value):
                    found.append((rel, node.lineno, node.value))
    for path in sorted((root / "roles").rglob("*.y*ml")) + sorted((root / "playbooks").rglob("*.y*ml")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if "models--" in line and not line.lstrip().startswith("#"):
                found.append((path.relative_to(root).as_posix(), n, line.strip()))
    return sorted(found)


def test_only_hub_cache_spells_the_hugging_face_cache_layout():
    spelled = hf_layout_spellings()
    assert not spelled, (
        f"the Hugging Face cache's layout (models--ORG--NAME, blobs, snapshots, refs, HF_HOME/hub) is "
        f"{HF_CACHE_OWNER}'s: call its functions (repo_dir, snapshot_dir, read_ref, ...) instead: {spelled}"
    )


# --------------------------------------------------------------------------- secret files: one reader

SECRET_FILE_ARGS = {"hf_token_file", "api_key_file", "vllm_api_key_file"}


def secret_file_reads(root: Path = ROOT) -> list:
    """(file, line) of every use of a secret-file argument's value (args["hf_token_file"], args.get(...)) that is
    not handed straight to dflash_host.host.tokens.read_secret."""
    found = []
    files = host_files(root) + sorted((root / "engine").rglob("*.py"))
    for path in files:
        tree = ast.parse(path.read_text())
        handed = set()
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and _call_name(call) == "read_secret":
                handed |= {id(n) for a in call.args for n in ast.walk(a)}
        for node in ast.walk(tree):
            key = None
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                key = node.slice.value
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                  and node.args and isinstance(node.args[0], ast.Constant)):
                key = node.args[0].value
            if key in SECRET_FILE_ARGS and id(node) not in handed:
                found.append((path.relative_to(root).as_posix(), node.lineno))
    return found


def test_secret_files_are_read_only_by_read_secret():
    """hf_token_file / vllm_api_key_file: their value goes to dflash_host.host.tokens.read_secret and nowhere else."""
    found = secret_file_reads()
    assert not found, f"a secret file's argument used outside read_secret (dflash_host/host/tokens.py): {found}"


# --------------------------------------------------------------------------- the scans see what they look for


def test_each_scan_finds_a_second_reader(tmp_path):
    """A raw read of the launch record, a spelled cache layout and a secret file read aside are each found."""
    (tmp_path / "dflash_host").mkdir()
    (tmp_path / "library").mkdir()
    (tmp_path / "engine").mkdir()
    (tmp_path / "dflash_host" / "x.py").write_text(
        'def status(p):\n    return read_json(p["launch"])\n\n\n'
        'def snapshot(repo, commit):\n    return os.path.join(repo, "snapshots", commit)\n'
    )
    (tmp_path / "library" / "m.py").write_text(
        'def run(args, ctx):\n    """Looks in models--ORG--NAME (prose: not counted)."""\n'
        '    with open(args["hf_token_file"]) as fh:\n        return {"token": fh.read(), "where": f"models--{args[\'x\']}"}\n'
    )
    assert raw_launch_reads(tmp_path) == [("dflash_host/x.py", "status", "read_json")]
    assert [(f, text) for f, _, text in hf_layout_spellings(tmp_path)] == [("dflash_host/x.py", "snapshots"),
                                                                            ("library/m.py", "models--")]
    assert secret_file_reads(tmp_path) == [("library/m.py", 3)]
