"""Chakra execution-trace (ET) interchange: write and read ``<prefix>.<rank>.et`` files.

Follows docs/reference-semantics.md part C: varint32-length-delimited protobuf messages (schema
``et_def.proto``, package ``ChakraProtoMsg``), a GlobalMetadata first, then the Nodes in topological
order; attribute types chosen so both ASTRA-sim feeders (the old ETFeeder and FeederV3) accept them.
The reader also takes files written by other tools (e.g. ASTRA-sim's microbenchmarks).
"""

from __future__ import annotations

import heapq
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError, Message

from moesim.errors import MoesimError
from moesim.fileio import atomic_write, refuse_special_file
from moesim.workload import et_def_pb2 as pb
from moesim.workload.graph import CollectiveType, Node, NodeKind, RankGraph, Workload

ET_VERSION = "0.0.4"
_ET_NAME = re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d+)\.et$")
_INT_KINDS = frozenset(
    f"{s}{b}_val" for s in ("int", "uint", "sint", "fixed", "sfixed") for b in ("32", "64")
)
_SUPPORTED_TYPES = ("COMP_NODE", "COMM_COLL_NODE")


def et_path(out_dir: str | Path, prefix: str, rank: int) -> Path:
    """``<out_dir>/<prefix>.<rank>.et`` (ASTRA-sim's ``--workload-configuration`` is ``<out_dir>/<prefix>``)."""
    return Path(out_dir) / f"{prefix}.{rank}.et"


def comm_groups_path(out_dir: str | Path, prefix: str) -> Path:
    """The communicator-group JSON (``--comm-group-configuration``, docs/reference-semantics.md C.4)."""
    return Path(out_dir) / f"{prefix}.comm_groups.json"


def logical_topology_path(out_dir: str | Path, prefix: str) -> Path:
    """``{"logical-dims": [...]}`` for ASTRA-sim's ``--logical-topology-configuration``."""
    return Path(out_dir) / f"{prefix}.logical_topology.json"


# ----------------------------------------------------------------------------------------------
# Writing


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _node_message(node: Node) -> pb.Node:
    msg = pb.Node(id=node.id, name=node.name, data_deps=node.deps)
    if node.duration_ns:
        msg.duration_micros = node.duration_ns // 1000
    msg.attr.add(name="is_cpu_op", bool_val=False)
    if node.kind is NodeKind.COMPUTE:
        msg.type = pb.COMP_NODE
        msg.attr.add(name="num_ops", int64_val=node.flops)
        msg.attr.add(name="tensor_size", uint64_val=node.bytes_moved)
    else:
        assert node.collective is not None, f"collective node {node.id} has no collective type"
        msg.type = pb.COMM_COLL_NODE
        msg.attr.add(name="comm_type", int64_val=int(node.collective))  # emitted even when 0
        msg.attr.add(name="comm_size", int64_val=node.size_bytes)
        if node.group != 0:
            msg.attr.add(name="pg_name", string_val=str(node.group))
        elif node.involved_dims:
            msg.attr.add(name="involved_dim", bool_list=pb.BoolList(values=node.involved_dims))
    # moesim extras (other readers ignore unknown attributes):
    if node.layer >= 0:
        msg.attr.add(name="layer", int64_val=node.layer)
    if node.duration_ns % 1000:
        msg.attr.add(name="duration_ns", uint64_val=node.duration_ns)
    if node.peak_scale != 1.0:  # a node in FP8 (precision.py); ASTRA-sim times it at its one peak-perf
        msg.attr.add(name="peak_scale", double_val=node.peak_scale)
    if node.bw_scale != 1.0:  # a node at its kernels' measured bandwidth (efficiency.py); ASTRA-sim ignores it
        msg.attr.add(name="bw_scale", double_val=node.bw_scale)
    return msg


def _encode_file(workload: Workload, graph: RankGraph) -> bytes:
    meta = pb.GlobalMetadata(version=ET_VERSION)
    meta.attr.add(name="workload_name", string_val=workload.name)
    meta.attr.add(name="logical_dims", int64_list=pb.Int64List(values=workload.logical_dims))
    parts = []
    messages: list[Message] = [meta, *(_node_message(n) for n in graph.nodes)]
    for msg in messages:
        body = msg.SerializeToString(deterministic=True)
        parts += [_varint(len(body)), body]
    return b"".join(parts)


def write_et(workload: Workload, out_dir: str | Path, prefix: str) -> list[Path]:
    """Write one ``<prefix>.<rank>.et`` per rank plus the comm-group and logical-topology JSONs.

    Returns the ET paths in rank order. Every file is written atomically; stale
    ``<prefix>.<n>.et`` files for ranks ≥ the rank count (from an earlier, larger export) are removed
    so that the directory always reads back as this workload.
    """
    if not prefix or "/" in prefix or os.sep in prefix:
        raise MoesimError(f"chakra export: field 'prefix': must be a plain file-name prefix, got {prefix!r}")
    if any(n.pair_bytes for g in workload.graphs for n in g.nodes):
        raise MoesimError(f"chakra export: {workload.name}: skewed routing gives all-to-alls per-pair sizes, "
                          "which Chakra ET cannot express (allowed: routing=uniform)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for g in workload.graphs:
        ids = {n.id for n in g.nodes}
        if len(ids) != len(g.nodes):
            raise MoesimError(
                f"{workload.name}: rank {g.rank}: node ids are not unique (Chakra requires unique ids)"
            )
    paths = []
    encoded: dict[int, bytes] = {}  # ranks sharing one node tuple share one encoding
    for rank, graph in enumerate(workload.graphs):
        if id(graph.nodes) not in encoded:
            encoded[id(graph.nodes)] = _encode_file(workload, graph)
        path = et_path(out, prefix, rank)
        atomic_write(path, encoded[id(graph.nodes)])
        paths.append(path)
    for stale in out.glob(f"{glob_escape(prefix)}.*.et"):
        m = _ET_NAME.match(stale.name)
        if m and m["prefix"] == prefix and int(m["rank"]) >= workload.num_ranks:
            stale.unlink()
    groups = {str(gid): list(members) for gid, members in workload.comm_groups}
    atomic_write(comm_groups_path(out, prefix), (json.dumps(groups, indent=1) + "\n").encode())
    dims = {"logical-dims": [str(d) for d in workload.logical_dims]}
    atomic_write(logical_topology_path(out, prefix), (json.dumps(dims) + "\n").encode())
    return paths


def glob_escape(text: str) -> str:
    """Escape glob metacharacters in a literal file-name part."""
    return re.sub(r"([*?\[])", r"[\1]", text)


# ----------------------------------------------------------------------------------------------
# Reading


def iter_messages(path: Path, data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """Yield (index, byte offset, body) of each length-delimited message; corrupt framing → MoesimError."""
    pos, index = 0, 0
    while pos < len(data):
        start, value, shift = pos, 0, 0
        while True:
            if pos >= len(data):
                raise MoesimError(
                    f"{path}: message {index} at byte offset {start}: truncated length prefix (file ends inside the varint)"
                )
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
            if shift >= 35:
                raise MoesimError(
                    f"{path}: message {index} at byte offset {start}: malformed length prefix (varint32 longer than 5 bytes)"
                )
        if value >= 1 << 31:
            raise MoesimError(
                f"{path}: message {index} at byte offset {start}: length prefix {value} exceeds 2^31 - 1"
            )
        if pos + value > len(data):
            raise MoesimError(
                f"{path}: message {index} at byte offset {start}: truncated message "
                f"(declares {value} bytes, only {len(data) - pos} remain)"
            )
        yield index, start, data[pos : pos + value]
        pos += value
        index += 1


def _attrs(attrs) -> dict[str, pb.AttributeProto]:
    out: dict[str, pb.AttributeProto] = {}
    for a in attrs:
        out.setdefault(a.name, a)
    return out


class _NodeReader:
    """Turns one decoded ``pb.Node`` into a moesim ``Node`` (errors name file, message and attribute)."""

    def __init__(self, path: Path, index: int, offset: int, msg: pb.Node) -> None:
        self.where = f"{path}: message {index} at byte offset {offset} (node id {msg.id})"
        self.msg = msg
        self.attrs = _attrs(msg.attr)

    def error(self, field: str, problem: str, allowed=None) -> MoesimError:
        text = f"{self.where}: field '{field}': {problem}"
        if allowed is not None:
            text += f" (allowed: {', '.join(str(a) for a in allowed)})"
        return MoesimError(text)

    def integer(self, name: str, default: int | None = None, minimum: int = 0) -> int:
        attr = self.attrs.get(name)
        if attr is None:
            if default is None:
                raise self.error(name, "required attribute is missing")
            return default
        kind = attr.WhichOneof("value")
        if kind not in _INT_KINDS:
            raise self.error(name, f"expected an integer value, got {kind or 'no value'}", sorted(_INT_KINDS))
        value = int(getattr(attr, kind))
        if value < minimum:
            raise self.error(name, f"must be ≥ {minimum}, got {value}")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        attr = self.attrs.get(name)
        if attr is None:
            return default
        kind = attr.WhichOneof("value")
        if kind == "bool_val":
            return attr.bool_val
        if kind in _INT_KINDS:
            return bool(getattr(attr, kind))
        raise self.error(name, f"expected bool_val, got {kind or 'no value'}")

    def positive(self, name: str, default: float) -> float:
        attr = self.attrs.get(name)
        if attr is None:
            return default
        kind = attr.WhichOneof("value")
        if kind not in ("double_val", "float_val"):
            raise self.error(name, f"expected double_val, got {kind or 'no value'}")
        value = float(getattr(attr, kind))
        if not 0 < value < float("inf"):
            raise self.error(name, f"must be a positive finite number, got {value}")
        return value

    def node(self) -> Node:
        msg = self.msg
        type_name = pb.NodeType.Name(msg.type) if msg.type in pb.NodeType.values() else str(msg.type)
        if type_name not in _SUPPORTED_TYPES:
            raise self.error("type", f"node type {type_name} is not supported", _SUPPORTED_TYPES)
        if self.boolean("is_cpu_op", False):
            raise self.error("is_cpu_op", "CPU operations are not supported", ["false"])
        deps = tuple(dict.fromkeys([*msg.data_deps, *msg.ctrl_deps]))
        duration_ns = self.integer("duration_ns", default=msg.duration_micros * 1000)
        common: dict[str, Any] = {
            "id": msg.id,
            "name": msg.name,
            "deps": deps,
            "duration_ns": duration_ns,
            "layer": self.integer("layer", default=-1, minimum=-1),
        }
        if type_name == "COMP_NODE":
            return Node(
                kind=NodeKind.COMPUTE,
                flops=self.integer("num_ops", 0),
                bytes_moved=self.integer("tensor_size", 0),
                peak_scale=self.positive("peak_scale", 1.0),
                bw_scale=self.positive("bw_scale", 1.0),
                **common,
            )
        ctype = self.integer("comm_type")
        if ctype not in CollectiveType._value2member_map_:
            raise self.error(
                "comm_type",
                f"collective type {ctype} is not supported",
                [f"{int(c)} ({c.name})" for c in CollectiveType],
            )
        return Node(
            kind=NodeKind.COLLECTIVE,
            collective=CollectiveType(ctype),
            size_bytes=self.integer("comm_size"),
            group=self._group(),
            involved_dims=self._dims(),
            **common,
        )

    def _group(self) -> int:
        attr = self.attrs.get("pg_name")
        if attr is None:
            return 0
        if attr.WhichOneof("value") != "string_val":
            raise self.error("pg_name", "expected string_val")
        text = attr.string_val.strip()
        if text in ("", "0"):
            return 0
        if not text.isdigit():
            raise self.error("pg_name", f"communicator group {text!r} is not a decimal id")
        return int(text)

    def _dims(self) -> tuple[bool, ...]:
        attr = self.attrs.get("involved_dim")
        if attr is None:
            return ()  # ASTRA-sim default: every dimension
        if attr.WhichOneof("value") != "bool_list":
            raise self.error("involved_dim", "expected bool_list")
        return tuple(bool(v) for v in attr.bool_list.values)


def _topological(path: Path, nodes: list[Node]) -> tuple[Node, ...]:
    """Keep file order if it is topological; otherwise reorder (stable, by file position)."""
    index = {}
    for i, n in enumerate(nodes):
        if n.id in index:
            raise MoesimError(f"{path}: node id {n.id} appears twice (ids must be unique within a file)")
        index[n.id] = i
    for n in nodes:
        for d in n.deps:
            if d not in index:
                raise MoesimError(f"{path}: node {n.id} depends on node {d}, which is not in the file")
    if all(index[d] < index[n.id] for n in nodes for d in n.deps):
        return tuple(nodes)
    waiting = {n.id: len(n.deps) for n in nodes}
    children: dict[int, list[int]] = {}
    for n in nodes:
        for d in n.deps:
            children.setdefault(d, []).append(n.id)
    ready = [index[n.id] for n in nodes if not n.deps]
    heapq.heapify(ready)
    order = []
    while ready:
        node = nodes[heapq.heappop(ready)]
        order.append(node)
        for c in children.get(node.id, ()):
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, index[c])
    if len(order) != len(nodes):
        raise MoesimError(f"{path}: the dependencies contain a cycle")
    return tuple(order)


def _read_file(path: Path) -> bytes:
    refuse_special_file(path, "Chakra ET file")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise MoesimError(f"{path}: cannot read: {exc.strerror}") from None


def _decode_file(path: Path, data: bytes) -> tuple[pb.GlobalMetadata, tuple[Node, ...]]:
    meta = None
    nodes: list[Node] = []
    for index, offset, body in iter_messages(path, data):
        try:
            if index == 0:
                meta = pb.GlobalMetadata.FromString(body)
                continue
            msg = pb.Node.FromString(body)
        except DecodeError as exc:
            kind = "GlobalMetadata" if index == 0 else "Node"
            raise MoesimError(
                f"{path}: message {index} at byte offset {offset}: not a valid {kind} ({exc})"
            ) from None
        nodes.append(_NodeReader(path, index, offset, msg).node())
    if meta is None:
        raise MoesimError(f"{path}: empty file (expected a GlobalMetadata message first)")
    return meta, _topological(path, nodes)


def _resolve(path: str | Path) -> tuple[Path, str, list[Path]]:
    """Directory, one ``.et`` file or a prefix → (directory, prefix, files in rank order)."""
    p = Path(path)
    if p.is_dir():
        directory = p
        prefixes = sorted({m["prefix"] for f in p.iterdir() if (m := _ET_NAME.match(f.name))})
        if not prefixes:
            raise MoesimError(f"{p}: no <prefix>.<rank>.et files in this directory")
        if len(prefixes) > 1:
            raise MoesimError(
                f"{p}: several ET workloads in this directory; give a prefix (found: {', '.join(prefixes)})"
            )
        prefix = prefixes[0]
    elif (m := _ET_NAME.match(p.name)) and p.is_file():
        directory, prefix = p.parent, m["prefix"]
    else:
        directory, prefix = p.parent, p.name
    ranks = {}
    if directory.is_dir():
        for f in directory.glob(f"{glob_escape(prefix)}.*.et"):
            m = _ET_NAME.match(f.name)
            if m and m["prefix"] == prefix:
                ranks[int(m["rank"])] = f
    if not ranks:
        raise MoesimError(f"{path}: no ET files found (expected {directory / prefix}.<rank>.et)")
    missing = sorted(set(range(max(ranks) + 1)) - set(ranks))
    if missing:
        raise MoesimError(
            f"{directory / prefix}: rank file(s) missing: {', '.join(f'{prefix}.{r}.et' for r in missing[:5])}"
        )
    return directory, prefix, [ranks[r] for r in range(len(ranks))]


def read_comm_groups(path: Path, num_ranks: int) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """ASTRA-sim's communicator-group JSON (group id → member ranks), checked against ``num_ranks``; none if
    the file is absent."""
    if not path.is_file():
        return ()
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise MoesimError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise MoesimError(f"{path}: expected a JSON object mapping group ids to rank lists")
    groups = []
    for key, members in raw.items():
        if not key.isdigit() or int(key) < 1:
            raise MoesimError(
                f"{path}: field '{key}': group ids must be decimal integers > 0 (0 is reserved)"
            )
        if (
            not isinstance(members, list)
            or not members
            or not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < num_ranks for r in members)
        ):
            raise MoesimError(
                f"{path}: field '{key}': must be a non-empty list of ranks (allowed: 0..{num_ranks - 1})"
            )
        groups.append((int(key), tuple(members)))
    return tuple(sorted(groups))


def read_et(path: str | Path, comm_groups: str | Path | None = None) -> Workload:
    """Read a Chakra ET workload from a directory, a ``<dir>/<prefix>`` path or one of its ``.et`` files.

    Logical dims come from moesim's GlobalMetadata attribute ``logical_dims`` if present, else
    ``(number of ranks,)``; communicator groups from ``comm_groups`` (ASTRA-sim's
    ``--comm-group-configuration``) if given, else from ``<prefix>.comm_groups.json`` if present. Every
    ``pg_name`` must name one of them.
    """
    directory, prefix, files = _resolve(path)
    graphs, metas = [], []
    decoded: dict[bytes, tuple[pb.GlobalMetadata, tuple[Node, ...]]] = {}  # identical files decode once
    for rank, f in enumerate(files):
        data = _read_file(f)
        if data not in decoded:
            decoded[data] = _decode_file(f, data)
        meta, nodes = decoded[data]
        metas.append(meta)
        graphs.append(RankGraph(rank=rank, nodes=nodes))
    meta_attrs = _attrs(metas[0].attr)
    name = meta_attrs["workload_name"].string_val if "workload_name" in meta_attrs else prefix
    dims: tuple[int, ...] = (len(files),)
    if "logical_dims" in meta_attrs:
        dims = tuple(int(v) for v in meta_attrs["logical_dims"].int64_list.values)
        product = 1
        for d in dims:
            product *= d
        if not dims or min(dims) < 1 or product != len(files):
            raise MoesimError(
                f"{files[0]}: field 'logical_dims': {list(dims)} does not multiply to the {len(files)} rank files"
            )
    groups_file = Path(comm_groups) if comm_groups is not None else comm_groups_path(directory, prefix)
    groups = read_comm_groups(groups_file, len(files))
    defined = {gid for gid, _ in groups}
    for f, g in zip(files, graphs, strict=True):
        for n in g.nodes:
            if n.group and n.group not in defined:
                raise MoesimError(
                    f"{f}: node {n.id}: field 'pg_name': communicator group {n.group} is not defined in "
                    f"{groups_file.name} (defined: {', '.join(map(str, sorted(defined))) or 'none'})"
                )
    return Workload(name=name, graphs=tuple(graphs), logical_dims=dims, comm_groups=groups)
