"""What a flow costs on its path, shared by the flow-level backends (``analytical``, ``flow``, ``fluid``).

A flow of S payload bytes loads every link of its route with (payload + headers)/payload wire bytes per
payload byte, and every link of the reverse route with ACK bytes per payload byte (the reference ACKs
every 1000 B packet with a 48 B ACK, docs/reference-semantics.md A.1). It completes (its sender holds
the final ACK) one fixed latency after its last byte leaves: forward and reverse propagation plus the
store-and-forward of the last packet and of its ACK on every further hop.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
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


class PathSet(NamedTuple):
    """``FlowPath`` of one flow on each of several routes of one length, as rows (``PathModel.on_routes``)."""

    fwd: np.ndarray
    """Links of each data path, one row per route."""
    links: np.ndarray
    """Per route ``fwd + rev`` as one row of link ids."""
    coefs: np.ndarray
    """The coefficient of each column of ``links`` (the same on every route)."""
    data_coef: float
    ack_coef: float
    latency_s: np.ndarray
    """The fixed latency of each route."""
    key: tuple[object, ...]
    """What every value but the link ids is a function of: the routes' link kinds (delay, bandwidth) in
    order, the INT bytes of the policy, the last packet's size (equal keys, equal values)."""


class PathModel:
    """Per-(route, policy, last packet) constants of flows on one topology."""

    def __init__(self, topology: Topology, params: NetworkParams) -> None:
        self.topology = topology
        self.params = params
        self.bw_Bps = np.array([link.bandwidth_bps / 8.0 for link in topology.links])
        self.delay_s = np.array([link.delay_s for link in topology.links])

        self._cache: dict[tuple[int, int, tuple[int, ...], bool, int], FlowPath] = {}
        self._by_pair: dict[tuple[int, int, bool, int], FlowPath] = {}
        self._by_kinds: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray]] = {}  # on_routes's costs by key

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
        paths = self.on_routes(flow, [fwd])
        rev = tuple(paths.links[0, len(fwd):].tolist())
        return FlowPath(fwd, rev, paths.data_coef, paths.ack_coef, paths.latency_s[0], paths.links[0], paths.coefs)

    def on_routes(self, flow: Flow, fwds: Sequence[tuple[int, ...]]) -> PathSet:
        """``describe`` of ``flow`` on each of the routes ``fwds`` (of one length: a GPU pair's equal-cost
        routes), together: every sum is taken in the order ``describe``'s own formula takes it (the fixed
        delays as numpy sums of each route's array, the store-and-forward terms left to right), so each
        value is the same to the bit."""
        p = self.params
        int_bytes = p.int_bytes if flow.cc else 0
        payload = p.transport.packet_payload_bytes
        data_coef = (payload + p.transport.data_header_bytes + int_bytes) / payload
        ack_bytes = p.transport.ack_bytes + max(0, int_bytes - 14)  # INT fills the ACK's padding first
        ack_coef = ack_bytes / payload
        last_pkt = min(payload, max(flow.size_bytes, 1)) + p.transport.data_header_bytes + int_bytes
        fwd = np.array(fwds, dtype=np.int64).reshape(len(fwds), -1)
        rev = self._reverse[fwd[:, ::-1]]
        if (rev < 0).any():  # a link without one in the opposite direction: the topology's own error
            self.topology.reverse_route(fwds[int(np.flatnonzero((rev < 0).any(axis=1))[0])])
        # every value below is a function of the (delay, bandwidth) of each link in order, the policy and the
        # last packet: routes alike in those (most pairs of a regular fabric) share them
        kind = self._kind
        key = (kind[fwd].tobytes(), kind[rev].tobytes(), fwd.shape, int_bytes, last_pkt)
        hit = self._by_kinds.get(key)
        if hit is None:
            lat = _row_sums(self.delay_s[fwd]) + _row_sums(self.delay_s[rev])
            lat += _left_to_right(last_pkt / self.bw_Bps[fwd[:, 1:]]) + _left_to_right(ack_bytes / self.bw_Bps[rev])
            coefs = np.array([data_coef] * fwd.shape[1] + [ack_coef] * rev.shape[1])
            hit = self._by_kinds[key] = (coefs, lat)
        return PathSet(fwd, np.concatenate([fwd, rev], axis=1), hit[0], data_coef, ack_coef, hit[1], key)

    @cached_property
    def _kind(self) -> np.ndarray:
        """Per link, a number naming its (delay, bandwidth): links with the same number cost a flow the same."""
        kinds: dict[tuple[float, float], int] = {}
        return np.array([kinds.setdefault((link.delay_s, link.bandwidth_bps), len(kinds))
                         for link in self.topology.links], dtype=np.int64)

    @cached_property
    def _reverse(self) -> np.ndarray:
        """Per link, the link of the same cable in the opposite direction (-1 where there is none)."""
        back = {(link.src, link.dst): i for i, link in enumerate(self.topology.links)}
        return np.array([back.get((link.dst, link.src), -1) for link in self.topology.links], dtype=np.int64)


def _row_sums(values: np.ndarray) -> np.ndarray:
    """Each row's ``sum()`` as a 1-D array of that row alone gives it (numpy's pairwise summation)."""
    return np.array([row.sum() for row in values], dtype=np.float64)


def _left_to_right(values: np.ndarray) -> np.ndarray:
    """Each row's Python ``sum`` (0 plus each column in turn)."""
    out = np.zeros(len(values))
    for j in range(values.shape[1]):
        out = out + values[:, j]
    return out
