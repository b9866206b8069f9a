"""Low-latency all-to-all, as DeepEP's low-latency kernels run it for decode.

Every token–expert row goes straight to the GPU holding the expert, as its own RDMA write: no relay
through a rail peer and no deduplication per server or GPU, so a pair (i, j) carries D/N (the direct
algorithm's message), all posted at once. The sending GPU posts the writes to its NIC itself (IBGDA) and
the receiver waits on a hook, so no SMs stay busy while the transfers are in flight (``sm_free``: the
engine's ``comm_sms`` does not apply). DeepEP's published low-latency figures were measured with pure
RDMA, pairs on one server included; the path a pair takes is the topology's (``rdma_only_server`` gives
a server whose GPUs reach each other only through their NICs). Reference: DeepEP
(github.com/deepseek-ai/DeepEP, docs/legacy.md "Low-latency kernels with pure RDMA", csrc/kernels/legacy/
internode_ll.cu).
"""

from __future__ import annotations

from dataclasses import replace

from moesim.system.collectives.base import COLLECTIVES, Algorithm, Members, Plan, StepTiming
from moesim.system.collectives.direct import direct_pair_plan, direct_plan
from moesim.topology.builder import ServerTemplate
from moesim.workload.graph import CollectiveType


def low_latency_plan(ctype: CollectiveType, n: int, size: int, timing: StepTiming, chunk_index: int = 0,
                     window: int = 0) -> Plan:
    """One chunk: member i writes D/N to every other member at once, straight to its destination."""
    return direct_plan(ctype, n, size, timing)


def low_latency_pair_plan(n: int, pairs: tuple[int, ...], timing: StepTiming, window: int = 0,
                          members: Members | None = None) -> Plan:
    """Per-pair sizes: member i writes ``pairs[i·n + j]`` bytes to member j, all at once (the direct pair plan
    without a window: every row is its own write, so skew changes only the sizes)."""
    return direct_pair_plan(n, pairs, timing)


def rdma_only_server(server: ServerTemplate) -> ServerTemplate:
    """``server`` as pure-RDMA kernels use it: only the cables between a GPU and its NIC (no GPU domain,
    no CPU on the path), so a flow between two of its GPUs leaves through one NIC and enters through the
    other's, across the fabric (GPUDirect RDMA; DeepEP's low-latency kernels without NVLink)."""
    cpus = set(server.cpus)
    cables = tuple(c for c in server.cables if c.a not in cpus and c.b not in cpus)
    return replace(server, cpus=(), cables=cables, domain=None)


COLLECTIVES.register(
    "low_latency", "DeepEP's low-latency all-to-all: every token–expert row straight to its expert's GPU over "
    "RDMA, all at once, occupying no SMs",
    "DeepEP docs/legacy.md, 'Low-latency kernels with pure RDMA' (github.com/deepseek-ai/DeepEP)",
)(Algorithm(frozenset({CollectiveType.ALL_TO_ALL}), low_latency_plan, expert_all_to_all=True, sm_free=True,
            pair_plan=low_latency_pair_plan))
