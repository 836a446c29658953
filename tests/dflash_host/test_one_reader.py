"""One reader per kind of JSON (docs/ARCHITECTURE.md says "the one reader"): this keeps it true.

The tool's own records (pidfile, launch/running records, markers, journals, the speed record) are read only
through dflash_host.host.files (load_json / read_json); a model's config.json only through
dflash_host.models.config.read_config_json; JSON nobody on the host wrote only through
dflash_host.host.untrusted_json. Any other JSON decode in the host package or a task module must be listed
here with what it decodes, so that a new reader is a decision, not an accident.
"""

from __future__ import annotations

import ast
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
    ("dflash_host/speed/bench_serve.py", "vllm_facts", "json.loads"): "a probe's stdout line",
    ("dflash_host/speed/bench_process.py", "_reply", "json.loads"): "the resident vllm bench serve's reply line",
    ("dflash_host/speed/workload.py", "parse_prompts", "json.loads"): "a line of the operator's prompts (checked)",
    ("dflash_host/env/build.py", "python_info", "json.loads"): "a probe's stdout line",
    ("dflash_host/env/interpreter.py", "probe_env", "json.loads"): "a probe's stdout line",
    ("dflash_host/env/interpreter.py", "run_python", "json.loads"): "a check script's stdout line",
    ("dflash_host/env/interpreter.py", "freeze_env", "json.loads"): "a probe's stdout line",
    ("dflash_host/module.py", "main", "json.load"): "the task's arguments file (the module contract)",
    ("library/tiny_models.py", "generate", "json.loads"): "the generator's stdout line",
    ("library/uri.py", "run", "json.loads"): "an HTTP answer the task asked for",
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
