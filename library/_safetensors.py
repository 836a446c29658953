"""Read the header of a safetensors checkpoint, never its weights.

A safetensors file is an 8-byte little-endian header length N, then N bytes of JSON naming every
tensor (dtype, shape, data_offsets), then the raw data. Everything a config needs is in the header,
so a multi-GB checkpoint is described by reading a few kilobytes. Sharded checkpoints list their
files in `model.safetensors.index.json` (`weight_map`: tensor name -> shard file).

Used by drafter_config; standard library only (runs on the host through the worker).
"""

from __future__ import annotations

import json
import os
import struct

from _common import ModuleError

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors library refuses larger headers too
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"

DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


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
        size = os.path.getsize(path)
        with open(path, "rb", buffering=0) as fh:
            length, raw = _read_length_and_header(path, fh, size)
    except FileNotFoundError:
        raise ModuleError(f"{path}: no such file; point 'drafter' at the drafter's folder or .safetensors file")
    except OSError as exc:
        raise ModuleError(f"{path}: cannot read the safetensors file ({exc.strerror}); check its permissions")
    bytes_read = 8 + len(raw)
    if len(raw) != length:
        raise ModuleError(f"{path}: truncated header: declared {length} bytes, read {len(raw)}; download it again")
    try:
        header = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ModuleError(
            f"{path}: not a safetensors file: its {length}-byte header is not UTF-8 text ({exc.reason} at byte {exc.start})"
        )
    except ValueError as exc:
        raise ModuleError(f"{path}: the safetensors header is not valid JSON ({exc}); the file is damaged")
    if not isinstance(header, dict):
        raise ModuleError(
            f"{path}: the safetensors header is JSON but not an object (got {type(header).__name__}); "
            f"the file is damaged or not a safetensors file"
        )
    metadata = header.pop("__metadata__", None) or {}
    data_size = size - 8 - length
    tensors = {}
    for name, entry in header.items():
        tensors[name] = _check_entry(path, name, entry, data_size)
    return {
        "tensors": tensors,
        "metadata": metadata,
        "bytes_read": bytes_read,
        "file_size": size,
    }


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


def _check_entry(path: str, name: str, entry, data_size: int) -> dict:
    where = f"{path}: tensor {name!r} in the safetensors header"
    if not isinstance(entry, dict):
        raise ModuleError(f"{where} is not an object; the file is damaged")
    dtype, shape, offsets = (
        entry.get("dtype"),
        entry.get("shape"),
        entry.get("data_offsets"),
    )
    if not isinstance(dtype, str):
        raise ModuleError(f"{where} has no dtype; the file is damaged")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ModuleError(f"{where} has a bad shape {shape!r}; the file is damaged")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise ModuleError(f"{where} has bad data_offsets {offsets!r}; the file is damaged")
    if offsets[1] > data_size:
        raise ModuleError(
            f"{path}: truncated file: tensor {name!r} ends at data byte {offsets[1]} but the file holds only "
            f"{data_size} data bytes (an interrupted download?); download the file again"
        )
    width = DTYPE_BYTES.get(dtype)
    if width is not None:
        count = 1
        for d in shape:
            count *= d
        if offsets[1] - offsets[0] != count * width:
            raise ModuleError(
                f"{where} declares shape {shape} of {dtype} ({count * width} bytes) but spans "
                f"{offsets[1] - offsets[0]} bytes; the file is damaged"
            )
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


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
        with open(index, encoding="utf-8") as fh:
            data = json.load(fh)
    except ValueError as exc:
        raise ModuleError(f"{index}: not valid JSON ({exc}); download the index file again")
    except OSError as exc:
        raise ModuleError(f"{index}: cannot read the shard index ({exc.strerror})")
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModuleError(f"{index}: no 'weight_map' object (tensor name -> shard file); the index is damaged")
    bad = sorted({repr(s) for s in weight_map.values() if not isinstance(s, str) or os.path.basename(s) != s})
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
        for name, entry in head["tensors"].items():
            if name in tensors:
                raise ModuleError(
                    f"{path}: tensor {name!r} also appears in {tensors[name]['file']}; the folder mixes two checkpoints; keep one"
                )
            tensors[name] = dict(entry, file=path)
    if weight_map is not None:
        for name, shard in weight_map.items():
            entry = tensors.get(name)
            if entry is None or os.path.basename(entry["file"]) != shard:
                raise ModuleError(
                    f"{index}: tensor {name!r} is listed in shard {shard} but that shard's header does not hold "
                    f"it; the index and the shards come from different downloads"
                )
    return {
        "folder": folder,
        "files": files,
        "tensors": tensors,
        "metadata": metadata,
        "bytes_read": bytes_read,
    }
