"""Read the header of a safetensors checkpoint, never its weights.

A safetensors file is an 8-byte little-endian header length N, then N bytes of JSON naming every
tensor (dtype, shape, data_offsets), then the raw data. Everything a config needs is in the header,
so a multi-GB checkpoint is described by reading a few kilobytes. Sharded checkpoints list their
files in `model.safetensors.index.json` (`weight_map`: tensor name -> shard file).

A header is hostile until checked: its size, nesting, entry count, dtypes, shapes, offsets and the
indices in tensor names are bounded before anything is built per what it declares, and every way a
file can be wrong is a ModuleError naming the file. The header's JSON is read through untrusted_json,
the same guard as for any JSON file a host did not write itself (config.json, the index).

Used by drafter_config; standard library only.
"""

from __future__ import annotations

import math
import os
import re
import stat
import struct

from dflash_host.host.untrusted_json import (
    MAX_JSON_FILE_BYTES,
    MAX_TENSORS,
    UnsafeJSON,
    brief_repr,
    load_json_file,
    loads_untrusted,
)
from dflash_host.module import ModuleError

MAX_HEADER_BYTES = MAX_JSON_FILE_BYTES  # the safetensors library's own limit; a 3.5 GB drafter's header is ~9 KB
MAX_RANK = 8
MAX_DIM = 2**40  # ~10**12 elements in one dimension; real ones stay below 10**7
MAX_INDEX = 10_000  # a numeric part of a tensor name (layer, expert, block); real ones stay below 1,000
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"

# Every dtype safetensors 0.8 knows, in bits per element (F4 and F6 pack below a byte).
DTYPE_BITS = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}

_NUMERIC_PART = re.compile(r"(?:^|\.)(\d+)(?=\.|\Z)")


# ----------------------------------------------------------------------------------------------
# One file's header


def _read_exact(fh, n: int) -> bytes:
    """Read up to n bytes from an unbuffered file, looping over short reads."""
    chunks = []
    left = n
    while left > 0:
        chunk = fh.read(left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_header(path: str) -> dict:
    """Return {"tensors": {name: {dtype, shape, data_offsets}}, "metadata": {...}, "bytes_read": n}.

    Reads exactly 8 + N bytes (unbuffered, so no read-ahead of the weights). Every way a file can be
    wrong (too short, not safetensors, truncated, bad JSON, bad entries) is a ModuleError naming it.
    """
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise ModuleError(f"{path}: not a regular file; point 'drafter' at the checkpoint's .safetensors file or folder")
        size = info.st_size
        with open(path, "rb", buffering=0) as fh:
            length, raw = _read_length_and_header(path, fh, size)
    except FileNotFoundError:
        raise ModuleError(f"{path}: no such file; point 'drafter' at the drafter's folder or .safetensors file")
    except OSError as exc:
        raise ModuleError(f"{path}: cannot read the safetensors file ({exc.strerror}); check its permissions")
    if len(raw) != length:
        raise ModuleError(f"{path}: truncated header: declared {length} bytes, read {len(raw)}; download it again")
    header = _parse_header(path, raw)
    metadata = _check_metadata(path, header.pop("__metadata__", None))
    if len(header) > MAX_TENSORS:
        raise ModuleError(
            f"{path}: the safetensors header names {len(header)} tensors, more than the {MAX_TENSORS} any real "
            f"checkpoint file holds; the file is damaged or crafted"
        )
    data_size = size - 8 - length
    tensors = {name: _check_entry(path, name, entry, data_size) for name, entry in header.items()}
    _check_no_overlap(path, tensors)
    return {
        "tensors": tensors,
        "metadata": metadata,
        "bytes_read": 8 + len(raw),
        "file_size": size,
    }


def _parse_header(path: str, raw: bytes) -> dict:
    """The header's JSON object, or a ModuleError saying why it is not one."""
    try:
        header = loads_untrusted(raw, unique_keys=True)
    except UnicodeDecodeError as exc:
        raise ModuleError(
            f"{path}: not a safetensors file: its {len(raw)}-byte header is not UTF-8 text ({exc.reason} at byte {exc.start})"
        )
    except UnsafeJSON as exc:
        raise ModuleError(f"{path}: the safetensors header is not one a checkpoint has: {exc}; the file is damaged or crafted")
    except ValueError as exc:
        raise ModuleError(f"{path}: the safetensors header is not valid JSON ({exc}); the file is damaged")
    if not isinstance(header, dict):
        raise ModuleError(
            f"{path}: the safetensors header is JSON but not an object (got {type(header).__name__}); "
            f"the file is damaged or not a safetensors file"
        )
    return header


def _read_length_and_header(path: str, fh, size: int) -> tuple:
    if size < 8:
        raise ModuleError(
            f"{path}: not a safetensors file: it has {size} bytes, fewer than the 8-byte header length "
            f"(an empty or interrupted download?); download the checkpoint again"
        )
    (length,) = struct.unpack("<Q", _read_exact(fh, 8))
    if length > size - 8:
        raise ModuleError(_length_error(path, fh, length, size))
    if length > MAX_HEADER_BYTES:
        raise ModuleError(
            f"{path}: not a safetensors file: its first 8 bytes declare a {length}-byte header, more than "
            f"the {MAX_HEADER_BYTES} bytes safetensors allows"
        )
    return length, _read_exact(fh, length)


def _length_error(path: str, fh, length: int, size: int) -> str:
    """Tell a truncated download (header JSON starts, but ends early) from a file of another kind."""
    start = _read_exact(fh, 1)
    if length <= MAX_HEADER_BYTES and start == b"{":
        return (
            f"{path}: truncated safetensors header: it declares {length} header bytes but the file holds only "
            f"{size - 8} after the length field (an interrupted download?); download the file again"
        )
    return (
        f"{path}: not a safetensors file: its first 8 bytes read as a header length of {length} bytes, larger "
        f"than the whole file ({size} bytes); point 'drafter' at the checkpoint's .safetensors file or folder"
    )


def _check_metadata(path: str, metadata) -> dict:
    """__metadata__ is optional, and a mapping of text to text (the safetensors library refuses anything else)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise ModuleError(
            f"{path}: the safetensors header's __metadata__ is a {type(metadata).__name__}, not a mapping of text "
            f"to text; the file is damaged or crafted"
        )
    bad = next((key for key, value in metadata.items() if not isinstance(value, str)), None)
    if bad is not None:
        raise ModuleError(
            f"{path}: the safetensors header's __metadata__ gives {brief_repr(bad)} a {type(metadata[bad]).__name__}, "
            f"not text; the file is damaged or crafted"
        )
    return metadata


def oversized_index(digits: str) -> str | None:
    """The digits of a tensor name's numeric part as a message shows them, when above MAX_INDEX; else None.

    The length is compared first, so a name with a million digits is never turned into an int.
    """
    if len(digits) > len(str(MAX_INDEX)) or int(digits) > MAX_INDEX:
        return digits if len(digits) <= 12 else f"{digits[:12]}... ({len(digits)} digits)"
    return None


def _check_name(path: str, name: str) -> None:
    """A numeric part of a tensor name (layers.N., experts.N.) is at most MAX_INDEX: readers index by it."""
    for match in _NUMERIC_PART.finditer(name):
        shown = oversized_index(match.group(1))
        if shown is not None:
            raise ModuleError(
                f"{path}: tensor {brief_repr(name)} has the index {shown}, above the {MAX_INDEX} any real checkpoint "
                f"uses for a layer, expert or block; the file is damaged or crafted"
            )


def _check_shape(where: str, shape) -> list:
    if not isinstance(shape, list) or len(shape) > MAX_RANK:
        rank = f" of {len(shape)} dimensions" if isinstance(shape, list) else ""
        raise ModuleError(f"{where} has a bad shape {brief_repr(shape)}{rank} (at most {MAX_RANK}); the file is damaged")
    for d in shape:
        if type(d) is not int or not 0 <= d < MAX_DIM:
            raise ModuleError(
                f"{where} has a bad shape {brief_repr(shape)}: each dimension must be a whole number from 0 to "
                f"{MAX_DIM - 1}; the file is damaged"
            )
    return list(shape)


def _check_no_overlap(path: str, tensors: dict) -> None:
    """Each byte of the data belongs to one tensor at most: the format forbids overlapping data_offsets
    (two tensors reading the same bytes, or one header claiming a buffer several times over)."""
    spans = sorted((t["data_offsets"][0], t["data_offsets"][1], n) for n, t in tensors.items() if t["data_offsets"][1] > t["data_offsets"][0])
    for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
        if start < end:
            raise ModuleError(
                f"{path}: tensors {brief_repr(first)} and {brief_repr(second)} overlap in the data (bytes {start} to "
                f"{end}); the safetensors format forbids overlapping data_offsets, so the file is damaged or crafted"
            )


def _check_entry(path: str, name: str, entry, data_size: int) -> dict:
    _check_name(path, name)
    where = f"{path}: tensor {brief_repr(name)} in the safetensors header"
    if not isinstance(entry, dict):
        raise ModuleError(f"{where} is not an object; the file is damaged")
    dtype, offsets = entry.get("dtype"), entry.get("data_offsets")
    if not isinstance(dtype, str):
        raise ModuleError(f"{where} has no dtype; the file is damaged")
    bits = DTYPE_BITS.get(dtype)
    if bits is None:
        raise ModuleError(
            f"{where} has dtype {brief_repr(dtype)}, which safetensors does not know (it knows "
            f"{', '.join(DTYPE_BITS)}); the file is damaged or crafted"
        )
    shape = _check_shape(where, entry.get("shape"))
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise ModuleError(f"{where} has bad data_offsets {brief_repr(offsets)}; the file is damaged")
    if offsets[1] > data_size:
        raise ModuleError(
            f"{path}: truncated file: tensor {brief_repr(name)} ends at data byte {offsets[1]} but the file holds only "
            f"{data_size} data bytes (an interrupted download?); download the file again"
        )
    count = math.prod(shape)
    if count * bits % 8:
        raise ModuleError(f"{where} declares {count} {dtype} elements, which do not end on a byte boundary; the file is damaged")
    if offsets[1] - offsets[0] != count * bits // 8:
        raise ModuleError(
            f"{where} declares shape {shape} of {dtype} ({count * bits // 8} bytes) but spans "
            f"{offsets[1] - offsets[0]} bytes; the file is damaged"
        )
    return {"dtype": dtype, "shape": shape, "data_offsets": list(offsets)}


# ----------------------------------------------------------------------------------------------
# A whole checkpoint: one file, a folder of files, or an index and its shards


def checkpoint_files(location: str) -> tuple[str, list[str], str | None, dict | None]:
    """Resolve a drafter location to (folder, safetensors files, index path, index weight_map).

    `location` may be a folder, a .safetensors file, or a model.safetensors.index.json.
    """
    location = os.path.abspath(location)
    if not os.path.exists(location):
        raise ModuleError(f"{location}: no such file or folder; set 'drafter' to the drafter checkpoint's folder")
    if os.path.isdir(location):
        folder = location
        index = os.path.join(folder, INDEX_NAME)
        if os.path.isfile(index):
            return _from_index(index)
        single = os.path.join(folder, SINGLE_NAME)
        if os.path.isfile(single):
            return folder, [single], None, None
        found = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
        if not found:
            raise ModuleError(
                f"{folder}: no {SINGLE_NAME}, no {INDEX_NAME} and no *.safetensors file; the drafter weights "
                f"are not there (still downloading, or a .bin/.pt checkpoint that needs converting?)"
            )
        return folder, [os.path.join(folder, f) for f in found], None, None
    if location.endswith(".index.json"):
        return _from_index(location)
    return os.path.dirname(location), [location], None, None


def _from_index(index: str) -> tuple[str, list[str], str, dict]:
    folder = os.path.dirname(index)
    try:
        data = load_json_file(index, unique_keys=True)
    except ValueError as exc:
        raise ModuleError(f"{index}: not valid JSON ({exc}); download the index file again")
    except OSError as exc:
        raise ModuleError(f"{index}: cannot read the shard index ({exc.strerror})")
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModuleError(f"{index}: no 'weight_map' object (tensor name -> shard file); the index is damaged")
    if len(weight_map) > MAX_TENSORS:
        raise ModuleError(
            f"{index}: weight_map names {len(weight_map)} tensors, more than the {MAX_TENSORS} any real checkpoint "
            f"has; the index is damaged or crafted"
        )
    bad = sorted({brief_repr(s) for s in weight_map.values() if not isinstance(s, str) or os.path.basename(s) != s})
    if bad:
        raise ModuleError(f"{index}: weight_map names shard files that are not plain file names: {bad[:3]}")
    shards = sorted(set(weight_map.values()))
    missing = [s for s in shards if not os.path.isfile(os.path.join(folder, s))]
    if missing:
        raise ModuleError(
            f"{index}: {len(missing)} of {len(shards)} shard file(s) named in the index are missing from {folder}: "
            f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}; finish the download"
        )
    return folder, [os.path.join(folder, s) for s in shards], index, weight_map


def read_checkpoint(location: str) -> dict:
    """Header facts of a whole checkpoint: {"folder", "files", "tensors", "metadata", "bytes_read"}.

    With an index, every tensor it names must be in the shard it names (else the index and the shards
    come from different downloads); a tensor name found in two files is refused.
    """
    folder, files, index, weight_map = checkpoint_files(location)
    tensors: dict = {}
    metadata: dict = {}
    bytes_read = 0
    for path in files:
        head = read_header(path)
        bytes_read += head["bytes_read"]
        metadata.update(head["metadata"])
        if len(tensors) + len(head["tensors"]) > MAX_TENSORS:
            raise ModuleError(
                f"{path}: with it the checkpoint names more than {MAX_TENSORS} tensors, more than any real "
                f"checkpoint has; the folder is damaged or crafted"
            )
        for name, entry in head["tensors"].items():
            if name in tensors:
                raise ModuleError(
                    f"{path}: tensor {brief_repr(name)} also appears in {tensors[name]['file']}; the folder mixes two "
                    f"checkpoints; keep one"
                )
            tensors[name] = dict(entry, file=path)
    if weight_map is not None:
        for name, shard in weight_map.items():
            entry = tensors.get(name)
            if entry is None or os.path.basename(entry["file"]) != shard:
                raise ModuleError(
                    f"{index}: tensor {brief_repr(name)} is listed in shard {shard} but that shard's header does not hold "
                    f"it; the index and the shards come from different downloads"
                )
    return {
        "folder": folder,
        "files": files,
        "tensors": tensors,
        "metadata": metadata,
        "bytes_read": bytes_read,
    }
