"""The fluid backend's flow table (``fluid.FlowTable``): one row per flow in start order, scalar columns
side by side in one block per dtype, a new row copied from its route's template. Structural checks: every
row holds its own flow's constants and fresh state through growth and widening, and compaction keeps the
surviving rows in order."""

from __future__ import annotations

import numpy as np
import pytest

from moesim.network.base import Flow
from moesim.network.cc.base import MAX_RATE, RATE
from moesim.network.fluid import SCALAR_COLUMNS, FluidBackend
from moesim.network.fluid_kernel import fluid_peek, fluid_run
from moesim.network.params import network_mode
from moesim.topology.catalog import get_topology, parse_topology

# topology 4: GPUs 0..3 share a PCIe switch (short routes), GPU 8 is on another server (long routes)
PAIRS = [(0, 1), (0, 8), (5, 2), (9, 30), (3, 0)]


def started(n_flows: int) -> FluidBackend:
    backend = FluidBackend(get_topology("4"), network_mode("roce_hpcc"))
    for i in range(n_flows):
        src, dst = PAIRS[i % len(PAIRS)]
        backend.start_flow(Flow(i, src, dst, 1000 + i, cc=i % 2 == 0), 0.0)
    return backend


def expected_row(backend: FluidBackend, flow_id: int) -> dict[str, object]:
    src, dst = PAIRS[flow_id % len(PAIRS)]
    flow = Flow(flow_id, src, dst, 1000 + flow_id, cc=flow_id % 2 == 0)
    fwd, rev, _, _, lat, _, _ = backend.path_model.describe(flow)
    return {"ids": flow_id, "rem": 1000 + flow_id, "hops": len(fwd) + len(rev), "nfwd": len(fwd),
            "first": fwd[0], "lat": lat, "links": list(fwd + rev), "bn": -1, "qport": -1, "sent": 0.0,
            "acked": 0.0, "npend": 0}


def check_rows(backend: FluidBackend, flow_ids: list[int]) -> None:
    cols = backend.flow_table.cols
    assert backend.flow_table.n == len(flow_ids)
    for i, flow_id in enumerate(flow_ids):
        want = expected_row(backend, flow_id)
        hops = want["hops"]
        assert list(cols["links"][i, :hops]) == want["links"], (i, flow_id)
        for name in ("ids", "rem", "hops", "nfwd", "first", "lat", "bn", "qport", "sent", "acked", "npend"):
            assert cols[name][i] == want[name], (i, flow_id, name)
        assert bool(cols["cc_on"][i]) == (flow_id % 2 == 0)


def test_every_row_holds_its_own_flow_through_growth_and_widening():
    """150 flows (the table starts at 64 rows, so it doubles twice; the first route is the shortest,
    so the link columns widen): each row has its flow's id, size, route and fresh state, and every
    scalar column is still a view of its dtype's block."""
    backend = started(150)
    check_rows(backend, list(range(150)))
    table = backend.flow_table
    assert table.width == max(expected_row(backend, i)["hops"] for i in range(len(PAIRS)))
    for dtype, names in SCALAR_COLUMNS.items():
        for name in names:
            assert np.shares_memory(table.cols[name], table.blocks[dtype]), name


def test_compaction_keeps_the_surviving_rows_in_order():
    backend = started(100)
    keep = np.arange(100) % 3 != 1
    backend.flow_table.keep(keep)
    check_rows(backend, [i for i in range(100) if keep[i]])


def test_the_compaction_kernel_keeps_exactly_the_live_rows_as_a_mask_would():
    """``compact`` (the kernel the backend calls) keeps the rows with bytes left, in order, and leaves every
    column's kept rows equal to what ``keep`` with that mask gives."""
    backend, other = started(100), started(100)
    drained = np.arange(100) % 4 == 2
    for b in (backend, other):
        b.flow_table.cols["rem"][:100][drained] = np.inf
    backend.flow_table.compact()
    other.flow_table.keep(~drained)
    assert backend.flow_table.n == other.flow_table.n == 75
    for name, col in other.flow_table.cols.items():
        assert np.array_equal(backend.flow_table.cols[name][:75], col[:75]), name


@pytest.mark.parametrize("mode,marks", [("roce_hpcc", "expected"), ("roce_dcqcn", "expected"),
                                        ("roce_dcqcn", "random")])
def test_flows_started_together_leave_every_column_as_one_by_one_starts(mode, marks):
    """``start_flows`` (whole-column copies from the route registry) against ``start_flow`` on each: after
    batches that grow the table, widen its link columns and follow a compaction (rows holding stale
    values), every column of every row, past a route's end included, is the same (the ECN-mark state
    too, drawn or not); so is a zero-byte flow."""
    params = network_mode(mode).with_overrides({"fluid_marks": marks})
    one, together = (FluidBackend(get_topology("4"), params) for _ in range(2))
    flows = [Flow(i, *PAIRS[(i * 7) % len(PAIRS)], 0 if i == 5 else 1000 + 37 * i, cc=i % 3 != 0) for i in range(300)]
    batches = [flows[:1], flows[1:90], flows[90:100], flows[100:300]]
    for k, batch in enumerate(batches):
        for flow in batch:
            one.start_flow(flow, 0.0)
        together.start_flows(batch, 0.0)
        if k == 1:  # retire every fourth row and compact: the next rows are written over stale ones
            for b in (one, together):
                b.flow_table.cols["rem"][: b.flow_table.n : 4] = np.inf
                b.flow_table.compact()
    assert one.flow_table.n == together.flow_table.n > 200
    assert one.flow_table.width == together.flow_table.width
    for name, col in one.flow_table.cols.items():
        assert np.array_equal(col, together.flow_table.cols[name]), name
    assert one.active_flows == together.active_flows
    assert np.array_equal(one.link_bytes, together.link_bytes)


@pytest.mark.parametrize("mode", ["roce_hpcc", "roce_dcqcn"])
def test_a_route_template_gives_a_congestion_controlled_flow_the_line_rate_state(mode):
    """A new CC flow starts at its NIC's line rate (the CC state row copied from its route's template)
    and a flow without CC carries no CC state."""
    backend = FluidBackend(get_topology("4"), network_mode(mode))
    backend.start_flow(Flow(0, 0, 8, 4096, cc=True), 0.0)
    backend.start_flow(Flow(1, 0, 8, 4096, cc=False), 0.0)
    cols = backend.flow_table.cols
    line_bps = get_topology("4").links[int(cols["first"][0])].bandwidth_bps
    assert cols["st"][0, RATE] == line_bps and cols["st"][0, MAX_RATE] == line_bps
    assert cols["cc_on"][0] and not cols["cc_on"][1]


class Dispatched(FluidBackend):
    """The fluid backend calling its kernels through numba's dispatcher (which types every argument on
    every call) instead of the compiled entry points ``_kernel_state`` resolves once."""

    def _kernel_state(self):  # type: ignore[no-untyped-def]
        state = super()._kernel_state()
        self._run_kernel, self._peek_kernel = fluid_run, fluid_peek
        return state


def completions(backend: FluidBackend) -> tuple[list[tuple[int, float]], int]:
    """(flow id, completion time) of flows started at two instants, in completion order, and the steps taken."""
    out: list[tuple[int, float]] = []
    for i, (src, dst) in enumerate(PAIRS * 2):
        backend.start_flow(Flow(i, src, dst, 300_000 + 7_000 * i, cc=True), 0.0 if i < len(PAIRS) else 5e-6)
        if i == len(PAIRS) - 1:
            out += [(f, 5e-6) for f in backend.advance_to(5e-6)]
    while backend.active_flows:
        t = backend.next_completion_s()
        out += [(f, t) for f in backend.advance_to(t)]
    return out, backend.steps


@pytest.mark.parametrize("mode", ["roce_hpcc", "roce_dcqcn", "ib_cc0"])
def test_compiled_entry_points_give_the_dispatchers_results_bit_for_bit(mode):
    default = completions(FluidBackend(get_topology("4"), network_mode(mode)))
    assert len(default[0]) == 2 * len(PAIRS) and default[1] > 0
    assert default == completions(Dispatched(get_topology("4"), network_mode(mode)))


def _closed_form_class(backend: FluidBackend, flow: Flow) -> dict[str, object]:
    """A flow's route class from the formulas, one flow at a time: its ECMP route (CRC-32 of
    "src:dst:flow_id" over the pair's routes), the reverse route, the fixed latency (the delays summed as
    numpy sums of each route's array, then the last packet's and the ACK's store-and-forward left to right),
    the packet backend's window (⌊rtt·min bw/8e9⌋ with rtt = Σ 2·delay + ⌊payload·8e9/bw⌋ ns)."""
    import math
    import zlib

    topo, p = backend.topology, backend.params
    options = topo.routes(flow.src_gpu, flow.dst_gpu)
    fwd = options[zlib.crc32(f"{flow.src_gpu}:{flow.dst_gpu}:{flow.flow_id}".encode()) % len(options)]
    rev = topo.reverse_route(fwd)
    links = topo.links
    delay = np.array([link.delay_s for link in links])
    bw_Bps = np.array([link.bandwidth_bps / 8.0 for link in links])
    int_bytes = p.int_bytes if flow.cc else 0
    payload = p.transport.packet_payload_bytes
    ack_bytes = p.transport.ack_bytes + max(0, int_bytes - 14)
    last_pkt = min(payload, max(flow.size_bytes, 1)) + p.transport.data_header_bytes + int_bytes
    lat = float(delay[list(fwd)].sum() + delay[list(rev)].sum())
    lat += sum(last_pkt / bw_Bps[i] for i in fwd[1:]) + sum(ack_bytes / bw_Bps[i] for i in rev)
    rtt_ns = sum(2 * int(round(links[i].delay_s * 1e9)) + math.floor(payload * 8e9 / links[i].bandwidth_bps)
                 for i in fwd)
    bw = min(links[i].bandwidth_bps for i in fwd)
    return {"links": list(fwd + rev), "lat": lat, "rtt0": rtt_ns * 1e-9, "nfwd": len(fwd), "hops": len(fwd + rev),
            "win": float(int(rtt_ns * bw / 1e9 / 8)) if p.transport.has_win else 0.0,
            "line": links[fwd[0]].bandwidth_bps / 8.0 / ((payload + p.transport.data_header_bytes + int_bytes) / payload)}


@pytest.mark.parametrize("mode", ["roce_hpcc", "ib_cc0"])
def test_route_classes_of_a_batch_are_the_closed_forms_flow_by_flow(mode):
    """Flows over a two-server HGX template (8 equal-cost routes between servers, one inside a server),
    started in batches: each row's links, latency, base RTT, window and line rate equal the closed forms of
    its own flow to the bit, and flows that take the same route of a class key share one route class."""
    backend = FluidBackend(parse_topology("hgx-h800:2").resolve(1e-6), network_mode(mode))
    flows = [Flow(i, i % 16, (5 * i + 3) % 16, 300 + 997 * (i % 5), cc=i % 4 != 1) for i in range(600)]
    flows = [f for f in flows if f.src_gpu != f.dst_gpu]
    for start in range(0, len(flows), 150):
        backend.start_flows(flows[start:start + 150], 0.0)
    cols, table = backend.flow_table.cols, backend.flow_table
    assert table.n == len(flows)
    for i, flow in enumerate(flows):
        want = _closed_form_class(backend, flow)
        assert cols["links"][i, :want["hops"]].tolist() == want["links"], flow
        for name in ("lat", "rtt0", "win", "line", "nfwd", "hops"):
            assert cols[name][i] == want[name], (flow, name)
    classes = {(f.src_gpu, f.dst_gpu, f.cc, min(f.size_bytes, 1000), tuple(cols["links"][i, :cols["hops"][i]]))
               for i, f in enumerate(flows)}
    assert backend.route_classes == len(classes)


def test_completions_come_out_in_time_then_start_order_however_many_are_due():
    """``advance_to`` pops few completions off the heap one by one and sorts when many are due: either way
    the ids due by each time come out in (completion time, start order), ties included, and the rest stay.
    Empty flows of one pair complete one route latency after they start, in start order."""
    from moesim.network.fluid import POP_ONE_BY_ONE

    probe = FluidBackend(get_topology("4"), network_mode("roce_hpcc"))
    probe.start_flow(Flow(0, 0, 1, 0), 0.0)
    lat = probe.next_completion_s()  # the pair's route latency
    backend = FluidBackend(get_topology("4"), network_mode("roce_hpcc"))
    rng = np.random.default_rng(7)
    starts = (np.sort(rng.integers(0, 40, size=500)) * 1e-6).tolist()  # many ties
    for i, s in enumerate(starts):
        backend.start_flow(Flow(i, 0, 1, 0), s)
    got: list[int] = []
    for t in (0.0, 2.5e-6, 2.5e-6, 30.5e-6, 1.0):  # between the 1 µs start grid's points
        out = backend.advance_to(t + lat)
        assert out == [i for i in range(500) if starts[i] <= t and i not in got]
        got += out
    assert got == list(range(500)) and backend.active_flows == 0
    assert max(starts.count(t) for t in starts) < POP_ONE_BY_ONE < 300  # both paths were taken
