"""Shared helpers for the topology tests (independent re-derivations, not calls into the code under test)."""

from __future__ import annotations

from moesim.topology import Topology


def node_path(topo: Topology, route: tuple[int, ...]) -> list[str]:
    """The node sequence a route visits; asserts that consecutive links join up."""
    nodes = [topo.links[route[0]].src]
    for lid in route:
        link = topo.links[lid]
        assert link.src == nodes[-1], f"route is not contiguous at link {lid}"
        nodes.append(link.dst)
    return nodes


def route_delay_s(topo: Topology, route: tuple[int, ...]) -> float:
    return sum(topo.links[i].delay_s for i in route)
