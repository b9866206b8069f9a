"""Checkpoint size from its files, reading only safetensors headers and the shard index, never tensor data.

safetensors layout (https://github.com/huggingface/safetensors, "Format"): 8 bytes little-endian u64 N,
then N bytes of JSON header ``{"__metadata__": {...}, name: {"dtype", "shape", "data_offsets": [b, e]}}``,
then the tensor data; offsets are relative to the end of the header. A sharded checkpoint also has
``model.safetensors.index.json`` with ``metadata.total_size`` (sum of tensor bytes) and ``weight_map``
(tensor → shard file). Sizes here are tensor bytes, the same quantity as ``total_size``.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moesim.errors import MoesimError, input_error
from moesim.fileio import refuse_special_file

MAX_HEADER_BYTES = 100_000_000
"""Largest header the safetensors reference implementation accepts."""

DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}  # fmt: skip
"""Bits per element of the safetensors dtypes (sub-byte dtypes pack elements into bytes)."""

INDEX_NAME = "model.safetensors.index.json"


@dataclass(frozen=True)
class SafetensorsHeader:
    """A parsed safetensors header: tensor entries, ``__metadata__``, and the sizes needed for checks."""

    tensors: dict[str, Any]
    metadata: dict[str, Any]
    header_bytes: int
    file_bytes: int


@dataclass(frozen=True)
class CheckpointSize:
    """Tensor bytes of a checkpoint and how they were obtained (for the report's ``source``)."""

    total_bytes: int
    source: str


def _tensor_bytes(name: str, entry: Any, source: str) -> tuple[int, int]:
    """(byte size, end offset) of one header entry, checking dtype × shape against data_offsets."""
    field = f"tensor '{name}'"
    if not isinstance(entry, dict):
        raise input_error(source, field, "header entry is not an object (corrupt header)")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(shape, list) or any(
        isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape
    ):
        raise input_error(source, f"{field}.shape", f"must be a list of non-negative integers, got {shape!r}")
    expected = None
    if isinstance(dtype, str) and dtype in DTYPE_BITS:
        expected = (DTYPE_BITS[dtype] * math.prod(shape) + 7) // 8
    if offsets is None:
        if expected is None:
            raise input_error(
                source,
                f"{field}.dtype",
                f"unknown dtype {dtype!r} and no data_offsets",
                allowed=sorted(DTYPE_BITS),
            )
        return expected, 0
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or any(isinstance(o, bool) or not isinstance(o, int) or o < 0 for o in offsets)
        or offsets[1] < offsets[0]
    ):
        raise input_error(
            source, f"{field}.data_offsets", f"must be [begin, end] with 0 <= begin <= end, got {offsets!r}"
        )
    size = offsets[1] - offsets[0]
    if expected is not None and size != expected:
        raise input_error(
            source,
            f"{field}.data_offsets",
            f"span {size} bytes but {dtype} {shape} needs {expected} (corrupt header)",
        )
    return size, offsets[1]


def read_safetensors_header(path: str | os.PathLike[str]) -> SafetensorsHeader:
    """The parsed JSON header of a safetensors file (8-byte length + JSON); tensor data is not read."""
    p = Path(path)
    source = str(p)
    refuse_special_file(p, "safetensors file")
    try:
        file_bytes = p.stat().st_size
        with p.open("rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise MoesimError(
                    f"{source}: truncated safetensors file ({file_bytes} bytes, no 8-byte header length)"
                )
            (n,) = struct.unpack("<Q", prefix)
            if n > MAX_HEADER_BYTES or n > file_bytes - 8:
                raise MoesimError(
                    f"{source}: corrupt or truncated safetensors file (header length {n} bytes, file {file_bytes} bytes)"
                )
            raw = f.read(n)
    except FileNotFoundError:
        raise MoesimError(f"{source}: safetensors file not found") from None
    except OSError as exc:
        raise MoesimError(f"{source}: cannot read safetensors file: {exc}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise MoesimError(f"{source}: corrupt safetensors header (not UTF-8 JSON)") from None
    if not isinstance(header, dict):
        raise MoesimError(f"{source}: corrupt safetensors header (not a JSON object)")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise MoesimError(f"{source}: corrupt safetensors header (__metadata__ is not an object)")
    return SafetensorsHeader(tensors=header, metadata=metadata, header_bytes=n, file_bytes=file_bytes)


def safetensors_tensor_bytes(path: str | os.PathLike[str]) -> int:
    """Sum of the tensor sizes declared in one safetensors file's header (data_offsets, else dtype × shape).

    The declared data must fit in the file: a file cut short is reported, naming it.
    """
    header = read_safetensors_header(path)
    source = str(path)
    file_bytes = header.file_bytes
    data_start = 8 + header.header_bytes
    total, data_end = 0, 0
    for name, entry in header.tensors.items():
        size, end = _tensor_bytes(name, entry, source)
        total += size
        data_end = max(data_end, end)
    if data_start + data_end > file_bytes:
        raise MoesimError(
            f"{source}: truncated safetensors file (header declares {data_start + data_end} bytes, file has {file_bytes})"
        )
    return total


def _index_size(index: Path) -> CheckpointSize:
    source = str(index)
    refuse_special_file(index, "checkpoint index")
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MoesimError(f"{source}: index file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MoesimError(f"{source}: not a readable JSON index: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise input_error(source, "<top level>", "must be a JSON object")
    meta = data.get("metadata") or {}
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if total is not None:
        if isinstance(total, bool) or not isinstance(total, int | float) or total <= 0 or total != int(total):
            raise input_error(source, "metadata.total_size", f"must be a positive integer, got {total!r}")
        return CheckpointSize(int(total), f"{source} (metadata.total_size)")
    weight_map = data.get("weight_map")
    if (
        not isinstance(weight_map, dict)
        or not weight_map
        or not all(isinstance(v, str) for v in weight_map.values())
    ):
        raise input_error(source, "weight_map", "needs metadata.total_size or a tensor → shard-file map")
    shards = sorted(set(weight_map.values()))
    for shard in shards:
        if not (index.parent / shard).is_file():
            raise input_error(source, "weight_map", f"shard file '{shard}' not found in {index.parent}")
    total = sum(safetensors_tensor_bytes(index.parent / s) for s in shards)
    return CheckpointSize(total, f"{source} (headers of {len(shards)} shards in weight_map)")


def checkpoint_size(path: str | os.PathLike[str]) -> CheckpointSize:
    """Tensor bytes of a checkpoint: a directory, a ``.safetensors`` file or a ``*.safetensors.index.json``.

    A directory uses ``model.safetensors.index.json`` (or its only ``*.safetensors.index.json``) when
    present, else the headers of all its ``*.safetensors`` files.
    """
    p = Path(path)
    if p.is_file():
        if p.name.endswith(".index.json"):
            return _index_size(p)
        if p.suffix == ".safetensors":
            return CheckpointSize(safetensors_tensor_bytes(p), f"{p} (safetensors header)")
        raise MoesimError(
            f"{p}: not a checkpoint file (allowed: *.safetensors, *.safetensors.index.json, a directory)"
        )
    if not p.is_dir():
        raise MoesimError(f"{p}: checkpoint not found")
    if (p / INDEX_NAME).is_file():
        return _index_size(p / INDEX_NAME)
    indexes = sorted(p.glob("*.safetensors.index.json"))
    if len(indexes) == 1:
        return _index_size(indexes[0])
    if len(indexes) > 1:
        raise MoesimError(
            f"{p}: several *.safetensors.index.json files; pass one of them: {', '.join(i.name for i in indexes)}"
        )
    files = sorted(p.glob("*.safetensors"))
    if not files:
        raise MoesimError(f"{p}: no *.safetensors files or {INDEX_NAME} in the checkpoint directory")
    total = sum(safetensors_tensor_bytes(f) for f in files)
    return CheckpointSize(total, f"{p} (headers of {len(files)} safetensors files)")
