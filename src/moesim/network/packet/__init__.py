"""Packet-level RDMA network backend (docs/reference-semantics.md part A), compiled with numba.

Modules: ``layout`` (state arrays), ``events`` (event queue), ``links`` (packets, queues, wires),
``mmu`` (switch buffer, PFC, ECN, INT), ``switch`` (forwarding, egress), ``nic`` (sender/receiver),
``qps`` (queue-pair lifecycle), ``ccdispatch`` (congestion control), ``kernel`` (event loop),
``build`` (tables from a Topology), ``backend`` (the registered ``packet`` backend).
"""

from moesim.network.packet.backend import PacketBackend

__all__ = ["PacketBackend"]
