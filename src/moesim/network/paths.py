"""What a flow costs on its path, shared by the flow-level backends (``analytical``, ``flow``, ``fluid``).

A flow of S payload bytes loads every link of its route with (payload + headers)/payload wire bytes per
payload byte, and every link of the reverse route with ACK bytes per payload byte (the reference ACKs
every 1000 B packet with a 48 B ACK, docs/reference-semantics.md A.1). It completes (its sender holds
the final ACK) one fixed latency after its last byte leaves: forward and reverse propagation plus the
store-and-forward of the last packet and of its ACK on every further hop.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from moesim.network.base import Flow
from moesim.network.params import NetworkParams
from moesim.topology.model import Topology


class FlowPath(NamedTuple):
    """A flow's route and its per-byte costs; one object per route class (``PathModel.describe``)."""

    fwd: tuple[int, ...]
    """Links of the data path."""
    rev: tuple[int, ...]
    """Links of the ACK path."""
    data_coef: float
    """Wire bytes per payload byte on a data link (headers, INT)."""
    ack_coef: float
    """ACK bytes per payload byte on an ACK link."""
    latency_s: float
    """Fixed latency from the last byte leaving to the final ACK reaching the sender."""
    links: np.ndarray
    """``fwd + rev`` as one row of link ids."""
    coefs: np.ndarray
    """The coefficient of each link in ``links``."""


class PathModel:
    """Per-(route, policy, last packet) constants of flows on one topology."""

    def __init__(self, topology: Topology, params: NetworkParams) -> None:
        self.topology = topology
        self.params = params
        self.bw_Bps = np.array([link.bandwidth_bps / 8.0 for link in topology.links])
        self.delay_s = np.array([link.delay_s for link in topology.links])

        self._cache: dict[tuple[int, int, tuple[int, ...], bool, int], FlowPath] = {}
        self._by_pair: dict[tuple[int, int, bool, int], FlowPath] = {}

    def describe(self, flow: Flow) -> FlowPath:
        """The flow's path and costs, cached per route, policy and last-packet size (the same object for
        every flow of one class), and looked up by GPU pair where the pair has a single route (no ECMP
        choice by flow id to make)."""
        last = min(self.params.transport.packet_payload_bytes, flow.size_bytes)
        pair = (flow.src_gpu, flow.dst_gpu, flow.cc, last)
        hit = self._by_pair.get(pair)
        if hit is not None:
            return hit
        hit = self.on_route(flow, self.topology.route(flow.src_gpu, flow.dst_gpu, flow.flow_id))
        if len(self.topology.routes(flow.src_gpu, flow.dst_gpu)) == 1:
            self._by_pair[pair] = hit
        return hit

    def on_route(self, flow: Flow, fwd: tuple[int, ...]) -> FlowPath:
        """``describe`` of ``flow`` on the route ``fwd`` its caller has already chosen (``Topology.route``)."""
        key = (flow.src_gpu, flow.dst_gpu, fwd, flow.cc, min(self.params.transport.packet_payload_bytes, flow.size_bytes))
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._describe(flow, fwd)
        return hit

    def _describe(self, flow: Flow, fwd: tuple[int, ...]) -> FlowPath:
        p = self.params
        rev = self.topology.reverse_route(fwd)
        int_bytes = p.int_bytes if flow.cc else 0
        payload = p.transport.packet_payload_bytes
        data_coef = (payload + p.transport.data_header_bytes + int_bytes) / payload
        ack_bytes = p.transport.ack_bytes + max(0, int_bytes - 14)  # INT fills the ACK's padding first
        ack_coef = ack_bytes / payload
        last_pkt = min(payload, max(flow.size_bytes, 1)) + p.transport.data_header_bytes + int_bytes
        lat = float(self.delay_s[list(fwd)].sum() + self.delay_s[list(rev)].sum())
        lat += sum(last_pkt / self.bw_Bps[i] for i in fwd[1:]) + sum(ack_bytes / self.bw_Bps[i] for i in rev)
        row = np.array(fwd + rev, dtype=np.int64)
        coef_row = np.array([data_coef] * len(fwd) + [ack_coef] * len(rev))
        return FlowPath(fwd, rev, data_coef, ack_coef, lat, row, coef_row)
