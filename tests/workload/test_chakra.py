"""Chakra ET write/read (docs/reference-semantics.md part C): round trips, the wire format, foreign files, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moesim.errors import MoesimError
from moesim.models.catalog import get_model, list_models
from moesim.workload import et_def_pb2 as pb
from moesim.workload.chakra import comm_groups_path, logical_topology_path, read_et, write_et
from moesim.workload.generator import generate
from moesim.workload.graph import CollectiveType, Node, NodeKind, RankGraph, Workload
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import STUDY_STRATEGIES, WorkloadOptions

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "chakra" / "astra-sim-microbenchmarks"
ALL_VALID = [
    (m.key, s)
    for m in list_models()
    for s in STUDY_STRATEGIES
    if m.routed_experts % ParallelLayout.parse(s).ep == 0
]


# --- an independent framing / wire encoder, written from the C.1 framing rule and the C.2 tag table ------


def varint(v: int) -> bytes:
    if v < 0:
        v += 1 << 64
    out = b""
    while v >= 0x80:
        out += bytes([v & 0x7F | 0x80])
        v >>= 7
    return out + bytes([v])


def ld(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, payload."""
    return tag + varint(len(payload)) + payload


def frame(*messages: bytes) -> bytes:
    return b"".join(varint(len(m)) + m for m in messages)


def split_frames(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, body) of each varint32-length-delimited message."""
    out, pos = [], 0
    while pos < len(data):
        start, length, shift = pos, 0, 0
        while True:
            b = data[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        out.append((start, data[pos : pos + length]))
        pos += length
    return out


def attr(name: str, value: bytes) -> bytes:
    return ld(b"\x52", ld(b"\x0a", name.encode()) + value)


# --- round trips ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("key,strategy", ALL_VALID)
def test_round_trip_every_model_and_strategy(tmp_path: Path, key: str, strategy: str) -> None:
    wl = generate(get_model(key), ParallelLayout.parse(strategy))
    paths = write_et(wl, tmp_path, "wl")
    assert [p.name for p in paths] == [f"wl.{r}.et" for r in range(32)]
    assert read_et(tmp_path) == wl
    assert read_et(tmp_path / "wl") == wl
    assert read_et(paths[5]) == wl


def test_round_trip_group_addressing_and_durations(tmp_path: Path) -> None:
    wl = generate(
        get_model("glm-5.3"),
        ParallelLayout.parse("TP8EP4"),
        512,
        WorkloadOptions(collective_addressing="groups"),
    )
    g0 = wl.graphs[0]
    extra = Node(len(g0.nodes), "replayed", NodeKind.COMPUTE, deps=(len(g0.nodes) - 1,), duration_ns=1500)
    wl = Workload(
        wl.name, (RankGraph(0, (*g0.nodes, extra)), *wl.graphs[1:]), wl.logical_dims, wl.comm_groups
    )
    write_et(wl, tmp_path, "g")
    assert read_et(tmp_path / "g") == wl
    # C.4: {"<id>": [ranks]} with ids > 0
    groups = json.loads(comm_groups_path(tmp_path, "g").read_text())
    assert groups == {str(i): list(m) for i, m in wl.comm_groups} and "0" not in groups
    assert json.loads(logical_topology_path(tmp_path, "g").read_text()) == {"logical-dims": ["8", "4"]}


def test_files_parse_with_the_protobuf_runtime(tmp_path: Path) -> None:
    """Decode with et_def_pb2 directly: metadata first, then nodes with the C.3 attribute kinds."""
    wl = generate(get_model("deepseek-v4-flash"), ParallelLayout.parse("TP4EP8"))
    path = write_et(wl, tmp_path, "f")[3]
    frames = split_frames(path.read_bytes())
    meta = pb.GlobalMetadata.FromString(frames[0][1])
    assert meta.version == "0.0.4"
    nodes = [pb.Node.FromString(body) for _, body in frames[1:]]
    assert len(nodes) == len(wl.graphs[3].nodes)
    seen = set()
    for msg, node in zip(nodes, wl.graphs[3].nodes, strict=True):
        attrs = {a.name: a for a in msg.attr}
        assert msg.id == node.id and list(msg.data_deps) == list(node.deps) and msg.name == node.name
        assert attrs["is_cpu_op"].WhichOneof("value") == "bool_val" and attrs["is_cpu_op"].bool_val is False
        assert attrs["layer"].int64_val == node.layer
        if msg.type == pb.COMP_NODE:
            assert (
                attrs["num_ops"].WhichOneof("value") == "int64_val"
                and attrs["num_ops"].int64_val == node.flops
            )
            assert attrs["tensor_size"].WhichOneof("value") == "uint64_val"
            assert attrs["tensor_size"].uint64_val == node.bytes_moved
        else:
            assert msg.type == pb.COMM_COLL_NODE
            assert attrs["comm_type"].WhichOneof("value") == "int64_val"  # present even for ALL_REDUCE = 0
            assert attrs["comm_type"].int64_val == int(node.collective)
            assert attrs["comm_size"].WhichOneof("value") == "int64_val"
            assert attrs["comm_size"].int64_val == node.size_bytes
            assert list(attrs["involved_dim"].bool_list.values) == list(node.involved_dims)
            seen.add(attrs["comm_type"].int64_val)
    assert seen == {0, 6}
    # comm_type ALL_REDUCE is on the wire as 48 00 (C.2 encoder rule)
    ar = next(body for _, body in frames[1:] if pb.Node.FromString(body).type == pb.COMM_COLL_NODE)
    assert ld(b"\x0a", b"comm_type") + b"\x48\x00" in ar


def test_writes_are_atomic_and_remove_stale_ranks(tmp_path: Path) -> None:
    model = get_model("deepseek-v4-flash")
    write_et(generate(model, ParallelLayout(tp=4, ep=8), 64), tmp_path, "w")
    small = generate(model, ParallelLayout(tp=2, ep=4), 64)
    write_et(small, tmp_path, "w")
    assert sorted(p.name for p in tmp_path.glob("w.*.et")) == sorted(f"w.{r}.et" for r in range(8))
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert read_et(tmp_path / "w") == small


# --- a hand-built byte-level fixture --------------------------------------------------------------------


def test_hand_built_bytes_decode(tmp_path: Path) -> None:
    is_cpu = attr("is_cpu_op", b"\xd8\x01\x00")
    comp = (
        ld(b"\x12", b"attn")
        + b"\x18\x04"
        + is_cpu
        + attr("num_ops", b"\x48" + varint(10**12))
        + attr("tensor_size", b"\x68" + varint(5 * 10**8))
    )
    ar = (
        b"\x08\x01"
        + ld(b"\x12", b"ar")
        + b"\x18\x07"
        + ld(b"\x2a", b"\x00")
        + is_cpu
        + attr("comm_type", b"\x48\x00")
        + attr("comm_size", b"\x48" + varint(1 << 20))
        + attr("involved_dim", ld(b"\xe2\x01", ld(b"\x0a", b"\x01\x00")))
        + attr("note", ld(b"\xea\x01", b"ignored"))
        + attr("layer", b"\x48\x03")
    )
    # other integer kinds (uint64, int32), ctrl_deps, duration_micros and a pg_name group
    a2a = (
        b"\x08\x07"
        + ld(b"\x12", b"a2a")
        + b"\x18\x07"
        + ld(b"\x2a", b"\x01")
        + ld(b"\x22", b"\x00\x01")
        + b"\x38\x05"
        + attr("comm_type", b"\x38\x06")
        + attr("comm_size", b"\x68" + varint(3000))
        + attr("pg_name", ld(b"\xea\x01", b"2"))
    )
    meta = ld(b"\x0a", b"0.0.4")
    (tmp_path / "hand.0.et").write_bytes(frame(meta, comp, ar, a2a))
    (tmp_path / "hand.1.et").write_bytes(frame(meta, comp))
    (tmp_path / "hand.comm_groups.json").write_text('{"2": [1, 0]}')
    wl = read_et(tmp_path)
    expected0 = (
        Node(0, "attn", NodeKind.COMPUTE, flops=10**12, bytes_moved=5 * 10**8),
        Node(
            1,
            "ar",
            NodeKind.COLLECTIVE,
            deps=(0,),
            collective=CollectiveType.ALL_REDUCE,
            size_bytes=1 << 20,
            involved_dims=(True, False),
            layer=3,
        ),
        Node(
            7,
            "a2a",
            NodeKind.COLLECTIVE,
            deps=(1, 0),
            duration_ns=5000,
            collective=CollectiveType.ALL_TO_ALL,
            size_bytes=3000,
            group=2,
        ),
    )
    assert wl == Workload(
        "hand", (RankGraph(0, expected0), RankGraph(1, expected0[:1])), (2,), ((2, (1, 0)),)
    )
    # and the protobuf runtime agrees with the hand encoding
    msg = pb.Node.FromString(a2a)
    assert (msg.id, list(msg.data_deps), list(msg.ctrl_deps), msg.duration_micros) == (7, [1], [0, 1], 5)


def test_out_of_order_nodes_are_sorted_topologically(tmp_path: Path) -> None:
    n0 = b"\x08\x05" + b"\x18\x04" + attr("num_ops", b"\x48\x0a") + ld(b"\x2a", b"\x09")
    n1 = b"\x08\x09" + b"\x18\x04" + attr("num_ops", b"\x48\x0b")
    (tmp_path / "o.0.et").write_bytes(frame(ld(b"\x0a", b"0.0.4"), n0, n1))
    nodes = read_et(tmp_path / "o").graphs[0].nodes
    assert [n.id for n in nodes] == [9, 5]


# --- files written by ASTRA-sim's tools -----------------------------------------------------------------

ASTRA = [
    (name, ctype, n)
    for name, ctype in (("all_reduce", 0), ("all_gather", 2), ("all_to_all", 6), ("reduce_scatter", 7))
    for n in (4, 8, 16)
]


@pytest.mark.parametrize("name,ctype,n", ASTRA)
def test_astra_sim_microbenchmarks(name: str, ctype: int, n: int) -> None:
    wl = read_et(FIXTURES / name / f"{n}npus_1MB")
    assert wl.num_ranks == n and wl.logical_dims == (n,) and wl.comm_groups == ()
    for rank, g in enumerate(wl.graphs):
        assert len(g.nodes) == 1
        node = g.nodes[0]
        assert node.kind is NodeKind.COLLECTIVE and int(node.collective) == ctype
        assert node.size_bytes == 1048576 and node.involved_dims == () and node.group == 0 and node.deps == ()
        assert node.id == rank  # ASTRA-sim numbers the node after its rank
        assert wl.collective_ranks(rank, node) == tuple(range(n))  # no involved_dim: every dimension


# --- errors ---------------------------------------------------------------------------------------------


def _error(path) -> str:
    with pytest.raises(MoesimError) as exc:
        read_et(path)
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_truncated_file(tmp_path: Path) -> None:
    wl = generate(get_model("deepseek-v4-flash"), ParallelLayout.parse("TP4EP8"), 64)
    path = write_et(wl, tmp_path, "t")[1]
    data = path.read_bytes()
    frames = split_frames(data)
    path.write_bytes(data[:-3])
    text = _error(tmp_path)
    last_offset = frames[-1][0]
    assert str(path) in text and f"message {len(frames) - 1} at byte offset {last_offset}" in text
    assert "truncated" in text


def test_garbage_varint_and_garbage_body(tmp_path: Path) -> None:
    meta = frame(ld(b"\x0a", b"0.0.4"))
    f = tmp_path / "g.0.et"
    f.write_bytes(meta + b"\xff" * 6)
    text = _error(f)
    assert f"message 1 at byte offset {len(meta)}" in text and "malformed length" in text
    f.write_bytes(meta + b"\x80")
    assert "truncated length prefix" in _error(f)
    f.write_bytes(meta + frame(b"\x0a\xff\xff\xff"))
    text = _error(f)
    assert f"message 1 at byte offset {len(meta)}" in text and "not a valid Node" in text


@pytest.mark.parametrize(
    "body,needle",
    [
        (b"\x18\x01", "node type METADATA_NODE is not supported"),
        (b"\x18\x05", "node type COMM_SEND_NODE is not supported"),
        (
            b"\x18\x07" + attr("comm_type", b"\x48\x00") + attr("comm_size", b"\x19" + b"\x00" * 8),
            "comm_size",
        ),
        (b"\x18\x07" + attr("comm_size", b"\x48\x01"), "'comm_type': required attribute is missing"),
        (b"\x18\x07" + attr("comm_type", b"\x48\x05") + attr("comm_size", b"\x48\x01"), "collective type 5"),
        (b"\x18\x04" + attr("is_cpu_op", b"\xd8\x01\x01"), "CPU operations are not supported"),
        (
            b"\x18\x07"
            + attr("comm_type", b"\x48\x00")
            + attr("comm_size", b"\x48\x01")
            + attr("pg_name", ld(b"\xea\x01", b"3")),
            "communicator group 3 is not defined",
        ),
        (b"\x18\x04" + ld(b"\x2a", b"\x04"), "depends on node 4"),
    ],
)
def test_unsupported_or_invalid_nodes(tmp_path: Path, body: bytes, needle: str) -> None:
    (tmp_path / "u.0.et").write_bytes(frame(ld(b"\x0a", b"0.0.4"), body))
    text = _error(tmp_path)
    assert needle in text and "u.0.et" in text


def test_missing_rank_and_missing_files(tmp_path: Path) -> None:
    meta = frame(ld(b"\x0a", b"0.0.4"))
    (tmp_path / "m.0.et").write_bytes(meta)
    (tmp_path / "m.2.et").write_bytes(meta)
    assert "m.1.et" in _error(tmp_path / "m")
    assert "no ET files" in _error(tmp_path / "nothing")
    (tmp_path / "z.0.et").write_bytes(b"")
    assert "several ET workloads" in _error(tmp_path)
    assert "empty file" in _error(tmp_path / "z")
