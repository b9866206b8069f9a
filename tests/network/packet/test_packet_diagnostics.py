"""Diagnostics of the packet backend: FCT, PFC, queue samples, port bytes; Parquet and reference text."""

from __future__ import annotations

import math

import pyarrow.parquet as pq
from helpers import star

from moesim.network.base import Flow
from moesim.network.diagnostics import DiagnosticsSpec, write_diagnostics
from moesim.network.packet import PacketBackend
from moesim.network.params import REFERENCE_PRESETS


def run(spec: DiagnosticsSpec, params=REFERENCE_PRESETS["none"], n=4, size=524_288):
    b = PacketBackend(star(n + 1), params, diagnostics=spec)
    for i in range(n):
        b.start_flow(Flow(i, i, n, size), 0.0)
    while (t := b.next_completion_s()) < math.inf:
        b.advance_to(t)
    return b


def test_fct_records_follow_the_reference_format(tmp_path):
    b = PacketBackend(star(2), REFERENCE_PRESETS["none"], diagnostics=DiagnosticsSpec(fct=True))
    b.start_flow(Flow(0, 0, 1, 524_288), 1e-6)
    b.start_flow(Flow(1, 0, 1, 1000), 1e-6)
    while (t := b.next_completion_s()) < math.inf:
        b.advance_to(t)
    write_diagnostics(b.tables(), tmp_path)
    lines = (tmp_path / "fct.txt").read_text().splitlines()
    first = [ln for ln in lines if " 524288 " in ln][0].split()
    # sip dip sport dport size start fct standalone; IPs 11.0.<id>.1; the standalone FCT of S1's message
    # on this path is 2040 + 549 488·8/400 = 13 029 ns, as the reference prints
    assert first[:5] == ["0b000001", "0b000101", "10000", "100", "524288"]
    assert first[5] == "1000" and first[7] == "13029"
    assert int(first[6]) > 13_029
    assert sorted(ln.split()[2] for ln in lines) == ["10000", "10001"]  # per-pair port counter
    table = pq.read_table(tmp_path / "fct.parquet")
    assert table.num_rows == 2 and set(table.column("size_bytes").to_pylist()) == {524_288, 1000}


def test_pfc_and_queue_logs_in_text_and_parquet(tmp_path):
    spec = DiagnosticsSpec.everything(qlen_interval_s=1e-6)
    b = run(spec, REFERENCE_PRESETS["none"].with_overrides({"has_win": False}), n=8, size=3_000_000)
    tables = b.tables()
    assert tables["pfc"].num_rows > 0
    written = write_diagnostics(tables, tmp_path)
    assert {p.name for p in written} >= {"fct.txt", "pfc.txt", "qlen.txt", "pfc.parquet", "qlen.parquet",
                                         "port_bytes.parquet"}
    pfc_lines = (tmp_path / "pfc.txt").read_text().splitlines()
    assert len(pfc_lines) == tables["pfc"].num_rows
    t, node, node_type, if_index, kind = map(int, pfc_lines[0].split())
    assert node_type == 0 and kind == 1 and if_index == 1  # a host NIC received a PAUSE
    qlen = (tmp_path / "qlen.txt").read_text().splitlines()
    assert qlen[0].startswith("time ") and " j " in qlen[0]
    fields = qlen[0].split()
    assert int(fields[2]) == 9  # the switch's node id; ports listed as "j <if> <bytes>"
    q = pq.read_table(tmp_path / "qlen.parquet").to_pydict()
    assert min(q["bytes"]) >= 1000 and len(set(q["time_ns"])) > 10
    pb = pq.read_table(tmp_path / "port_bytes.parquet").to_pydict()
    into_receiver = [bts for s, d, bts in zip(pb["src"], pb["dst"], pb["bytes"], strict=True) if d == "h8"][0]
    assert into_receiver == 8 * (3_000_000 + 36 * 3000)  # data only: no ACK or PFC frame goes to h8


def test_logs_are_bounded():
    spec = DiagnosticsSpec(qlen=True, qlen_interval_s=1e-7, qlen_min_bytes=0, max_rows=50)
    b = run(spec, n=4, size=200_000)
    q = b.tables()["qlen"]
    assert q.num_rows == 50 and q.schema.metadata[b"truncated"] == b"true"


def test_no_diagnostics_requested_means_no_tables():
    b = run(DiagnosticsSpec(), n=2, size=10_000)
    d = b.diagnostics()
    assert not {"fct", "pfc", "qlen", "port_bytes"} & set(d)
    assert d["parameters"]["cc_algorithm"] == "none" and len(d["link_bytes"]) == len(b.topology.links)


def test_parameters_record_the_cc_values_used():
    p = REFERENCE_PRESETS["dcqcn"].with_overrides({"rp_timer_s": 100e-6})
    b = PacketBackend(star(2), p)
    rec = b.parameters()
    assert rec["cc_algorithm"] == "dcqcn" and rec["cc_parameters"]["rp_timer_s"] == 100e-6
    assert rec["network"]["rate_ai_bps"] == 80e6
