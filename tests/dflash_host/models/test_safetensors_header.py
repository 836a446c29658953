"""The safetensors header reader: real files, only the header read, every bad file a clear error."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parents[3]


from make_checkpoint import drafter_tensors, write_sparse_safetensors  # noqa: E402

from dflash_host.models.safetensors_header import read_checkpoint, read_header  # noqa: E402
from dflash_host.module import ModuleError  # noqa: E402


def rchar() -> int | None:
    """Bytes this process has read through read()-like calls (Linux /proc/self/io)."""
    try:
        with open("/proc/self/io", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("rchar:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def test_header_of_a_file_written_by_the_safetensors_library_gives_names_dtypes_and_shapes(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file(
        {
            "fc.weight": np.zeros((64, 128), dtype=np.float32),
            "norm.weight": np.ones(64, dtype=np.float16),
            "layers.0.mlp.up_proj.weight": np.zeros((96, 64), dtype=np.float32),
        },
        str(path),
        metadata={"format": "pt"},
    )
    head = read_header(str(path))
    assert head["metadata"] == {"format": "pt"}
    assert {n: (t["dtype"], t["shape"]) for n, t in head["tensors"].items()} == {
        "fc.weight": ("F32", [64, 128]),
        "norm.weight": ("F16", [64]),
        "layers.0.mlp.up_proj.weight": ("F32", [96, 64]),
    }
    (length,) = struct.unpack("<Q", path.read_bytes()[:8])
    assert head["bytes_read"] == 8 + length


def test_sharded_checkpoint_is_read_through_its_index(tmp_path):
    save_file({"fc.weight": np.zeros((8, 16), dtype=np.float32)}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({"norm.weight": np.zeros(8, dtype=np.float32)}, str(tmp_path / "model-00002-of-00002.safetensors"))
    index = {
        "metadata": {"total_size": 8 * 16 * 4 + 8 * 4},
        "weight_map": {
            "fc.weight": "model-00001-of-00002.safetensors",
            "norm.weight": "model-00002-of-00002.safetensors",
        },
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    ckpt = read_checkpoint(str(tmp_path))
    assert sorted(ckpt["tensors"]) == ["fc.weight", "norm.weight"]
    assert [os.path.basename(f) for f in ckpt["files"]] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    assert ckpt["tensors"]["norm.weight"]["file"].endswith("model-00002-of-00002.safetensors")
    # The index file itself is accepted as the location too.
    assert read_checkpoint(str(tmp_path / "model.safetensors.index.json"))["files"] == ckpt["files"]


def test_a_single_safetensors_file_or_its_folder_are_both_accepted(tmp_path):
    save_file({"fc.weight": np.zeros((4, 8), dtype=np.float32)}, str(tmp_path / "model.safetensors"))
    assert read_checkpoint(str(tmp_path))["files"] == [str(tmp_path / "model.safetensors")]
    assert read_checkpoint(str(tmp_path / "model.safetensors"))["files"] == [str(tmp_path / "model.safetensors")]


def test_a_3_gb_drafter_checkpoint_is_read_touching_only_its_header(tmp_path):
    # The shape of a 27B DFlash drafter: hidden 5120, 5 layers, fc.weight [5120, 25600] in bf16.
    # How fast that is belongs to `invoke bench` (bench/header.py); here: the bytes it reads.
    path = tmp_path / "model.safetensors"
    tensors = drafter_tensors(hidden=5120, layers=5, heads=32, kv_heads=8, head_dim=128, intermediate=17408, k=5)
    length = write_sparse_safetensors(str(path), tensors, metadata={"format": "pt"})
    assert path.stat().st_size > 3_000_000_000  # the declared size is real
    assert path.stat().st_blocks * 512 < 1_000_000  # but the file is sparse

    before = rchar()
    head = read_header(str(path))
    after = rchar()

    assert head["tensors"]["fc.weight"] == {
        "dtype": "BF16",
        "shape": [5120, 25600],
        "data_offsets": [0, 262144000],
    }
    assert len(head["tensors"]) == 3 + 5 * 11
    assert head["bytes_read"] == 8 + length
    assert before is not None and after is not None, "/proc/self/io is needed to count the bytes read"
    assert after - before <= head["bytes_read"] + 4096, f"read {after - before} bytes for a {length}-byte header"


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _header_file(path: Path, header: dict, data_bytes: int = 0, length: int | None = None) -> str:
    raw = json.dumps(header).encode()
    declared = len(raw) if length is None else length
    return _write(path, struct.pack("<Q", declared) + raw + b"\0" * data_bytes)


BAD_FILES = [
    ("an_empty_file", lambda p: _write(p, b""), "not a safetensors file: it has 0 bytes"),
    (
        "a_file_shorter_than_the_length_field",
        lambda p: _write(p, b"\x01\x02"),
        "fewer than the 8-byte header length",
    ),
    (
        "a_text_file",
        lambda p: _write(p, b'{\n  "architectures": ["Qwen3ForCausalLM"]\n}\n'),
        "not a safetensors file: its first 8 bytes read as a header length",
    ),
    (
        "a_truncated_header",
        lambda p: _write(p, struct.pack("<Q", 5000) + b'{"fc.weight": {"dtype": "F32", "sha'),
        "truncated safetensors header: it declares 5000 header bytes but the file holds only",
    ),
    (
        "a_header_length_larger_than_the_file",
        lambda p: _write(p, struct.pack("<Q", 1 << 40) + b"\x00" * 64),
        "larger than the whole file (72 bytes)",
    ),
    ("invalid_json", lambda p: _write(p, struct.pack("<Q", 10) + b"{not json}"), "header is not valid JSON"),
    ("a_json_list_header", lambda p: _write(p, struct.pack("<Q", 2) + b"[]"), "JSON but not an object"),
    (
        "a_tensor_without_dtype",
        lambda p: _header_file(p, {"fc.weight": {"shape": [2], "data_offsets": [0, 8]}}, 8),
        "tensor 'fc.weight' in the safetensors header has no dtype",
    ),
    (
        "a_bad_shape",
        lambda p: _header_file(p, {"fc.weight": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 8]}}, 8),
        "has a bad shape [-1]",
    ),
    (
        "data_shorter_than_the_header_declares",
        lambda p: _header_file(p, {"fc.weight": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}, 10),
        "truncated file: tensor 'fc.weight' ends at data byte 64 but the file holds only 10 data bytes",
    ),
    (
        "offsets_that_disagree_with_the_shape",
        lambda p: _header_file(p, {"fc.weight": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 32]}}, 32),
        "declares shape [4, 4] of F32 (64 bytes) but spans 32 bytes",
    ),
]


@pytest.mark.parametrize("make,expected", [b[1:] for b in BAD_FILES], ids=[b[0] for b in BAD_FILES])
def test_a_bad_file_is_a_clear_error_naming_it(tmp_path, make, expected):
    path = make(tmp_path / "model.safetensors")
    with pytest.raises(ModuleError) as err:
        read_header(path)
    assert expected in err.value.msg
    assert path in err.value.msg


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ModuleError, match="no such file"):
        read_header(str(tmp_path / "nope.safetensors"))


def _sharded(tmp_path: Path, weight_map: dict, write: dict) -> None:
    for name, tensors in write.items():
        save_file({k: np.zeros(2, dtype=np.float32) for k in tensors}, str(tmp_path / name))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def test_shards_missing_from_the_folder_are_named(tmp_path):
    _sharded(tmp_path, {"a": "model-1.safetensors", "b": "model-2.safetensors"}, {"model-1.safetensors": ["a"]})
    with pytest.raises(ModuleError) as err:
        read_checkpoint(str(tmp_path))
    assert "1 of 2 shard file(s) named in the index are missing" in err.value.msg
    assert "model-2.safetensors" in err.value.msg
    assert "model.safetensors.index.json" in err.value.msg


def test_an_index_naming_a_tensor_its_shard_lacks_is_refused(tmp_path):
    _sharded(tmp_path, {"a": "model-1.safetensors", "b": "model-1.safetensors"}, {"model-1.safetensors": ["a"]})
    with pytest.raises(ModuleError, match="tensor 'b' is listed in shard model-1.safetensors but that shard"):
        read_checkpoint(str(tmp_path))


@pytest.mark.parametrize(
    "index_text,expected",
    [
        ("{not json", "not valid JSON"),
        ('{"metadata": {}}', "no 'weight_map' object"),
        ('{"weight_map": {"a": "../elsewhere.safetensors"}}', "not plain file names"),
    ],
)
def test_a_bad_index_is_a_clear_error(tmp_path, index_text, expected):
    (tmp_path / "model.safetensors.index.json").write_text(index_text)
    with pytest.raises(ModuleError, match=expected):
        read_checkpoint(str(tmp_path))


def test_a_folder_without_safetensors_says_what_is_missing(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(ModuleError, match=r"no model.safetensors, no model.safetensors.index.json and no \*.safetensors"):
        read_checkpoint(str(tmp_path))


def test_a_tensor_in_two_unindexed_files_is_refused(tmp_path):
    save_file({"fc.weight": np.zeros(2, dtype=np.float32)}, str(tmp_path / "a.safetensors"))
    save_file({"fc.weight": np.zeros(2, dtype=np.float32)}, str(tmp_path / "b.safetensors"))
    with pytest.raises(ModuleError, match="mixes two checkpoints"):
        read_checkpoint(str(tmp_path))


@pytest.mark.parametrize("second", [[0, 16], [8, 24], [15, 31]])
def test_overlapping_data_offsets_are_refused(tmp_path, second):
    """Two tensors reading the same bytes: the safetensors format forbids it (a crafted header)."""
    header = {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
              "b": {"dtype": "F32", "shape": [4], "data_offsets": second}}
    path = _header_file(tmp_path / "x.safetensors", header, data_bytes=32)
    with pytest.raises(ModuleError, match="overlap"):
        read_header(path)


def test_adjacent_tensors_and_empty_ones_are_fine(tmp_path):
    header = {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
              "e": {"dtype": "F32", "shape": [0], "data_offsets": [16, 16]},
              "b": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}}
    assert set(read_header(_header_file(tmp_path / "x.safetensors", header, data_bytes=32))["tensors"]) == {"a", "e", "b"}
