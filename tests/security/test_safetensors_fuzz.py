"""The safetensors header reader and drafter_config fed hostile files: only ModuleError comes out, memory stays small.

Fuzzed with hypothesis: random bytes, random bytes and random JSON behind a valid length prefix,
header-shaped JSON with random dtypes, shapes, offsets, names and metadata, and whole drafter
checkpoints with random layer indices, sizes and target/drafter config values run through the real
drafter_config module. Then one test per hostile case found by hand (each failed on the code before
the fix: RecursionError, ZeroDivisionError, TypeError, ValueError, or gigabytes allocated).
"""

from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from make_checkpoint import drafter_tensors, write_sparse_safetensors

from dflash_host.models.drafter_choices import parse_layer_ids
from dflash_host.models.drafter_shape import infer_drafter_shape
from dflash_host.models.safetensors_header import read_checkpoint, read_header
from dflash_host.module import Context, ModuleError, execute
from library import drafter_config as dc

ROOT = Path(__file__).resolve().parents[2]
# No example database and no explain phase: nothing is written into the checkout. ~250 examples a test
# keeps the five fuzz tests under 20 s together.
FUZZ = settings(
    max_examples=250,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
)
PEAK_LIMIT = 8 * 2**20  # bytes one fuzzed file of at most a few KB may make the reader allocate
KNOWN_DTYPES = (
    "BOOL F4 F6_E2M3 F6_E3M2 U8 I8 F8_E5M2 F8_E4M3 F8_E8M0 F8_E4M3FNUZ F8_E5M2FNUZ I16 U16 F16 BF16 I32 U32 F32 C64 F64 I64 U64"
).split()
TARGET = {
    "architectures": ["Qwen3ForCausalLM"],
    "hidden_size": 64,
    "num_hidden_layers": 8,
    "vocab_size": 512,
    "rms_norm_eps": 1e-06,
    "max_position_embeddings": 512,
    "rope_theta": 1000000,
}


@pytest.fixture(scope="module")
def scratch():
    """One folder for the whole module (hypothesis reuses it across examples)."""
    with tempfile.TemporaryDirectory(prefix="dfp-fuzz-") as folder:
        yield Path(folder)


def framed(body: bytes, declared: int | None = None) -> bytes:
    return struct.pack("<Q", len(body) if declared is None else declared) + body


def traced(fn, *args):
    """(what fn returned, or the ModuleError it raised; the peak bytes it allocated). Any other exception
    escapes. Memory is traced only around the call, so hypothesis itself runs at full speed."""
    tracemalloc.start()
    try:
        try:
            outcome = fn(*args)
        except ModuleError as err:
            outcome = err
        return outcome, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def read_traced(path: Path):
    """(read_checkpoint's result or None when refused, peak bytes allocated)."""
    result, peak = traced(read_checkpoint, str(path))
    if isinstance(result, ModuleError):
        assert path.name in result.msg, result.msg  # the error names the file
        result = None
    return result, peak


def assert_within_the_format(ckpt: dict) -> None:
    """What an accepted header guarantees to its readers (drafter_config relies on every line)."""
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in ckpt["metadata"].items())
    for name, t in ckpt["tensors"].items():
        assert t["dtype"] in KNOWN_DTYPES, (name, t)
        assert len(t["shape"]) <= 8 and all(type(d) is int and 0 <= d < 2**40 for d in t["shape"]), (name, t)
        start, end = t["data_offsets"]
        assert type(start) is int and type(end) is int and 0 <= start <= end, (name, t)


def write_file(scratch: Path, data: bytes) -> Path:
    path = scratch / "model.safetensors"
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------------------------------------
# Fuzz


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()  # NaN and Infinity come out of json.dumps as the non-JSON tokens NaN, Infinity
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.just("__metadata__") | st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
dims = st.integers(min_value=-2, max_value=4) | st.sampled_from([2**40 - 1, 2**40, 2**63, 2**64 + 1]) | json_scalars
names = (
    st.from_regex(r"(model\.)?layers\.[0-9]{1,30}\.(mlp|self_attn)\.[a-z_]{1,6}\.weight", fullmatch=True)
    | st.sampled_from(["fc.weight", "__metadata__", "layers..x", "layers.-1.x"])
    | st.text(max_size=16)
)
entries = (
    st.fixed_dictionaries(
        {
            "dtype": st.sampled_from(KNOWN_DTYPES + ["X", "f32", ""]) | json_scalars,
            "shape": st.lists(dims, max_size=10) | json_values,
            "data_offsets": st.lists(st.integers(min_value=-1, max_value=80) | dims, max_size=3) | json_values,
        }
    )
    | json_values
)
headers = st.dictionaries(names, entries, max_size=6)
metadata = st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3) | json_values


@FUZZ
@given(data=st.binary(max_size=400), declared=st.none() | st.integers(min_value=0, max_value=2**64 - 1))
def test_random_bytes_are_read_or_refused_with_a_module_error(scratch, data, declared):
    raw = data if declared is None else framed(data, declared)
    ckpt, peak = read_traced(write_file(scratch, raw))
    if ckpt is not None:
        assert_within_the_format(ckpt)
    assert peak < PEAK_LIMIT


@FUZZ
@given(value=json_values, tail=st.integers(min_value=0, max_value=64))
def test_random_json_behind_a_valid_length_prefix_is_read_or_refused(scratch, value, tail):
    ckpt, peak = read_traced(write_file(scratch, framed(json.dumps(value).encode()) + b"\0" * tail))
    if ckpt is not None:
        assert_within_the_format(ckpt)
    assert peak < PEAK_LIMIT


@FUZZ
@given(header=headers, meta=st.none() | metadata, tail=st.integers(min_value=0, max_value=96))
def test_header_shaped_json_with_random_entries_is_read_or_refused(scratch, header, meta, tail):
    if meta is not None:
        header = {"__metadata__": meta, **header}
    ckpt, peak = read_traced(write_file(scratch, framed(json.dumps(header).encode()) + b"\0" * tail))
    if ckpt is not None:
        assert_within_the_format(ckpt)
        for t in ckpt["tensors"].values():
            assert t["data_offsets"][1] <= tail
    assert peak < PEAK_LIMIT


sizes = st.integers(min_value=0, max_value=3) | st.sampled_from([8, 16, 64])
configs = st.fixed_dictionaries(
    {},
    optional={
        "head_dim": st.integers(min_value=-1, max_value=40) | json_scalars,
        "num_attention_heads": st.integers(min_value=-1, max_value=8) | json_scalars,
        "block_size": st.integers(min_value=-1, max_value=2**40) | json_scalars,
        "dflash_config": st.fixed_dictionaries(
            {},
            optional={
                "mask_token_id": st.integers(min_value=-1, max_value=2**40) | json_scalars,
                "target_layer_ids": st.lists(st.integers(min_value=-1, max_value=2**70), max_size=3) | json_values,
                "block_size": st.integers(min_value=-1, max_value=2**40) | json_scalars,
            },
        ),
        "layer_types": json_values,
    },
)
target_values = st.fixed_dictionaries(
    {},
    optional={
        key: st.integers(min_value=-1, max_value=2**64) | json_scalars
        for key in ("vocab_size", "num_hidden_layers", "hidden_size", "rms_norm_eps", "max_position_embeddings")
    },
)


@FUZZ
@given(
    hidden=sizes,
    head_dim=sizes,
    heads=st.integers(min_value=0, max_value=3),
    intermediate=sizes,
    k=st.integers(min_value=0, max_value=3),
    extra_layers=st.lists(st.integers(min_value=0, max_value=12) | st.integers(min_value=0, max_value=10**40), max_size=3),
    norms=st.booleans(),
    existing=st.none() | configs,
    target=target_values,
    mask=st.none() | st.integers(min_value=-1, max_value=600),
    block=st.none() | st.integers(min_value=-1, max_value=2**40),
)
def test_drafter_checkpoints_with_random_sizes_and_layer_indices_fail_only_with_a_module_error(
    scratch, hidden, head_dim, heads, intermediate, k, extra_layers, norms, existing, target, mask, block
):
    drafter, target_dir = scratch / "dflash", scratch / "target"
    for folder in (drafter, target_dir):
        folder.mkdir(exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
    table = drafter_tensors(
        hidden=hidden, layers=1, heads=heads, kv_heads=heads, head_dim=head_dim, intermediate=intermediate, k=k,
        dtype="F32", norms=norms,
    )  # fmt: skip
    for index in extra_layers:  # a copy of layer 0 under each extra index
        table.update({n.replace("layers.0.", f"layers.{index}.", 1): v for n, v in table.items() if n.startswith("layers.0.")})
    write_sparse_safetensors(str(drafter / "model.safetensors"), table, {"format": "pt"})
    if existing is not None:
        (drafter / "config.json").write_text(json.dumps(existing))
    (target_dir / "config.json").write_text(json.dumps({**TARGET, "hidden_size": hidden, **target}))

    # execute() turns a ModuleError into a failed result; any other exception escapes and fails the test
    args = {"drafter": str(drafter), "target": str(target_dir), "mask_token_id": mask, "block_size": block}
    res, peak = traced(execute, dc.ARGS, dc.run, args, Context(check=True), "drafter_config")
    assert isinstance(res["msg"], str) and res["msg"]
    assert peak < PEAK_LIMIT


# ------------------------------------------------------------------------------------------------
# Hostile cases found by hand


def header_file(tmp_path: Path, header, data: int = 0, name: str = "model.safetensors") -> Path:
    path = tmp_path / name
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(framed(body) + b"\0" * data)
    return path


def test_a_header_nested_100_000_deep_is_refused_not_a_recursion_error(tmp_path):
    path = header_file(tmp_path, b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    with pytest.raises(ModuleError) as err:
        read_header(str(path))
    assert str(path) in err.value.msg and "deeper than" in err.value.msg


@pytest.mark.parametrize("meta", [[1, 2], "format=pt", {"format": 1}, {"format": {"pt": "yes"}}])
def test_metadata_that_is_not_a_mapping_of_text_is_refused(tmp_path, meta):
    path = header_file(tmp_path, {"__metadata__": meta, "t": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, 1)
    with pytest.raises(ModuleError) as err:
        read_checkpoint(str(path))
    assert str(path) in err.value.msg and "__metadata__" in err.value.msg


def tiny_drafter(tmp_path: Path, **extra) -> tuple:
    """A tiny drafter (hidden 64, 1 layer, k=2) with extra tensors {name: (dtype, shape)}, and a tiny target."""
    drafter, target = tmp_path / "dflash", tmp_path / "target"
    drafter.mkdir()
    target.mkdir()
    table = drafter_tensors(hidden=64, layers=1, heads=4, kv_heads=2, head_dim=32, intermediate=128, k=2, dtype="F32")
    table.update(extra)
    write_sparse_safetensors(str(drafter / "model.safetensors"), table, {"format": "pt"})
    (target / "config.json").write_text(json.dumps(TARGET))
    return drafter, target


def run_module(drafter: Path, target: Path, **args) -> dict:
    return execute(
        dc.ARGS, dc.run, {"drafter": str(drafter), "target": str(target), "mask_token_id": 3, **args}, Context(), "drafter_config"
    )


def test_a_5000_digit_layer_index_is_refused_by_the_reader_and_by_drafter_config(tmp_path):
    huge = "9" * 5000
    drafter, target = tiny_drafter(tmp_path, **{f"layers.{huge}.mlp.up_proj.weight": ("F32", [1])})
    with pytest.raises(ModuleError) as err:
        read_header(str(drafter / "model.safetensors"))
    assert "5000 digits" in err.value.msg and "10000" in err.value.msg
    res = run_module(drafter, target)
    assert res["failed"] and "5000 digits" in res["msg"]
    with pytest.raises(ModuleError, match="5000 digits"):  # and without the reader in front of it
        infer_drafter_shape({"fc.weight": {"dtype": "F32", "shape": [64, 128]}, f"layers.{huge}.x": {"shape": [1]}}, "here")


def run_limited(argv: list, tmp_path: Path, limit_mib: int = 512) -> subprocess.CompletedProcess:
    """Run a fresh python whose address space is capped, so a per-index allocation fails loudly."""

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit_mib * 2**20, limit_mib * 2**20))

    env = dict(os.environ, PYTHONPATH=str(ROOT))  # `-m library.NAME` from tmp_path
    return subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                          preexec_fn=cap)


def test_a_layer_index_of_100_million_costs_no_memory(tmp_path):
    # Before: range(100000001) walked and a list of 100 million missing indices built (~4 GB, seconds).
    drafter, target = tiny_drafter(tmp_path)
    table = drafter_tensors(hidden=64, layers=1, heads=4, kv_heads=2, head_dim=32, intermediate=128, k=2, dtype="F32")
    table.update({n.replace("layers.0.", "layers.100000000.", 1): v for n, v in table.items() if n.startswith("layers.0.")})
    write_sparse_safetensors(str(drafter / "model.safetensors"), table, {"format": "pt"})
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"drafter": str(drafter), "target": str(target), "mask_token_id": 3}))
    by_hand = run_limited(["-m", "library.drafter_config", str(args)], tmp_path)
    assert "Traceback" not in by_hand.stderr, by_hand.stderr[-2000:]
    result = json.loads(by_hand.stdout)
    assert result["failed"] and "100000000" in result["msg"] and "above" in result["msg"], result["msg"]
    code = f"""
import sys
sys.path += [{str(ROOT)!r}, {str(ROOT / "tests" / "fixtures" / "drafter_configs")!r}]
from dflash_host.models.drafter_shape import infer_drafter_shape
from dflash_host.module import ModuleError
from make_checkpoint import drafter_tensors
table = drafter_tensors(hidden=64, layers=1, heads=4, kv_heads=2, head_dim=32, intermediate=128, k=2, dtype="F32")
table.update({{n.replace("layers.0.", "layers.100000000.", 1): v for n, v in table.items() if n.startswith("layers.0.")}})
try:
    infer_drafter_shape({{n: {{"dtype": d, "shape": s}} for n, (d, s) in table.items()}}, "here")
except ModuleError as err:
    print(err.msg)
"""
    direct = run_limited(["-c", code], tmp_path)  # infer_drafter_shape on its own (a table not from the reader)
    assert direct.returncode == 0 and "100000000" in direct.stdout, direct.stderr[-2000:]


@pytest.mark.parametrize(
    "extra, expected",
    [
        ({"layers.0.self_attn.q_norm.weight": ("F32", [0]), "layers.0.self_attn.k_norm.weight": ("F32", [0])}, "head_dim"),
        ({"layers.0.mlp.gate_proj.weight": ("F32", [0, 64]), "layers.0.mlp.up_proj.weight": ("F32", [0, 64]),
          "layers.0.mlp.down_proj.weight": ("F32", [64, 0])}, "intermediate"),
    ],
    ids=["q_norm-of-size-0", "an-mlp-of-size-0"],
)  # fmt: skip
def test_zero_sizes_in_the_weights_are_refused_not_divided_by(tmp_path, extra, expected):
    drafter, target = tiny_drafter(tmp_path, **extra)
    res = run_module(drafter, target)
    assert res["failed"] and expected in res["msg"] and "0" in res["msg"], res["msg"]


@pytest.mark.parametrize(
    "key, value",
    [
        ("vocab_size", "lots"),
        ("vocab_size", -5),
        ("vocab_size", 0),
        ("vocab_size", 2**63),
        ("vocab_size", True),
        ("vocab_size", 512.5),
        ("num_hidden_layers", 10**6),
        ("hidden_size", 2**64),
        ("rms_norm_eps", "lots"),
        ("rms_norm_eps", 0),
        ("max_position_embeddings", -1),
        ("max_position_embeddings", "long"),
    ],
)
def test_bad_numbers_in_the_target_config_are_named(tmp_path, key, value):
    drafter, target = tiny_drafter(tmp_path)
    (target / "config.json").write_text(json.dumps({**TARGET, key: value}))
    res = run_module(drafter, target)
    assert res["failed"] and key in res["msg"] and str(target / "config.json") in res["msg"], res["msg"]


@pytest.mark.parametrize("where", ["target", "drafter"])
def test_a_config_json_nested_100_000_deep_is_refused_not_a_recursion_error(tmp_path, where):
    drafter, target = tiny_drafter(tmp_path)
    config = (target if where == "target" else drafter) / "config.json"
    config.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    res = run_module(drafter, target)
    assert res["failed"] and str(config) in res["msg"] and "deeper than" in res["msg"], res["msg"]


def test_an_index_nested_100_000_deep_is_refused_not_a_recursion_error(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ModuleError) as err:
        read_checkpoint(str(tmp_path))
    assert "model.safetensors.index.json" in err.value.msg and "deeper than" in err.value.msg


def test_a_huge_block_size_in_the_existing_config_is_refused(tmp_path):
    drafter, target = tiny_drafter(tmp_path)
    (drafter / "config.json").write_text(json.dumps({"dflash_config": {"mask_token_id": 3, "block_size": 10**12}}))
    res = run_module(drafter, target)
    assert res["failed"] and "block_size 1000000000000" in res["msg"], res["msg"]


def test_an_infinite_layer_id_is_refused_not_an_overflow_error():
    with pytest.raises(ModuleError, match="target_layer_ids"):  # YAML's .inf, given as drafter_target_layer_ids
        parse_layer_ids([float("inf")])


@pytest.mark.parametrize(
    "entry, expected",
    [
        ({"dtype": "X", "shape": [1], "data_offsets": [0, 1]}, "dtype 'X'"),
        ({"dtype": "U8", "shape": [1] * 9, "data_offsets": [0, 1]}, "9 dimensions"),
        ({"dtype": "U8", "shape": [2**40, 0], "data_offsets": [0, 0]}, "bad shape"),
        ({"dtype": "U8", "shape": [True], "data_offsets": [0, 1]}, "bad shape"),
        ({"dtype": "U8", "shape": [1], "data_offsets": [0, True]}, "bad data_offsets"),
        ({"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}, "byte boundary"),
    ],
    ids=["unknown-dtype", "rank-9", "dim-2**40", "bool-dim", "bool-offset", "F4-odd-count"],
)
def test_entries_the_safetensors_format_does_not_allow_are_refused(tmp_path, entry, expected):
    path = header_file(tmp_path, {"t": entry}, 8)
    with pytest.raises(ModuleError) as err:
        read_header(str(path))
    assert str(path) in err.value.msg and "'t'" in err.value.msg and expected in err.value.msg


def test_a_tensor_named_twice_in_one_header_is_refused(tmp_path):
    entry = '{"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}'
    path = header_file(tmp_path, f'{{"fc.weight": {entry}, "fc.weight": {entry}}}'.encode(), 1)
    with pytest.raises(ModuleError, match="'fc.weight' twice"):
        read_header(str(path))


def test_a_header_of_two_million_empty_lists_is_refused_before_it_is_built(tmp_path):
    # 6 MB of text that json.loads would turn into ~130 MB of Python lists
    path = header_file(tmp_path, b'{"t": [' + b",".join([b"[]"] * 2_000_000) + b"]}")
    err, peak = traced(read_header, str(path))
    assert isinstance(err, ModuleError) and str(path) in err.msg and "more objects and lists" in err.msg
    assert peak < 32 * 2**20, f"{peak / 2**20:.0f} MiB"  # the text and its copy without strings, no lists


@pytest.mark.slow  # ~5 s: the 500,001-entry header is parsed before it is counted
def test_more_tensors_than_any_checkpoint_has_are_refused(tmp_path):
    from dflash_host.host.untrusted_json import MAX_TENSORS

    entry = b'{"dtype":"U8","shape":[0],"data_offsets":[0,0]}'
    body = b"{" + b",".join(b'"t%d":%s' % (i, entry) for i in range(MAX_TENSORS + 1)) + b"}"
    path = header_file(tmp_path, body)
    with pytest.raises(ModuleError) as err:
        read_header(str(path))
    assert str(path) in err.value.msg and f"{MAX_TENSORS + 1} tensors" in err.value.msg
