"""Ring collectives (ASTRA-sim ``Ring.cc``; docs/reference-semantics.md B.2).

Member i always sends to i+1 and receives from i-1, one message in flight: step k+1's send waits for
step k's receive plus the bundle delay. With ``timing.receive_with_send`` (ASTRA-sim posts the receive
of step k when it sends step k) step k+1 also waits for its own step k to have left (a member that
starts late sends its backlog one bundle delay apart), and its stream exits after its last send too.
All-reduce = 2(N-1) messages of D/N (the first N-1 received are reduced), reduce-scatter N-1 of D/N
(all reduced), all-gather N-1 of D, all-to-all N(N-1)/2 of D/N.
"""

from __future__ import annotations

from moesim.system.collectives.base import COLLECTIVES, Algorithm, Plan, StepTiming, Transfer
from moesim.workload.graph import CollectiveType


def ring_plan(ctype: CollectiveType, n: int, size: int, timing: StepTiming, chunk_index: int = 0,
              window: int = 0) -> Plan:
    if ctype is CollectiveType.ALL_REDUCE:
        steps, msg, reduced = 2 * (n - 1), size // n, n - 1
    elif ctype is CollectiveType.REDUCE_SCATTER:
        steps, msg, reduced = n - 1, size // n, n - 1
    elif ctype is CollectiveType.ALL_GATHER:
        steps, msg, reduced = n - 1, size, 0
    else:  # ALL_TO_ALL on a ring: sequential D/N messages to the neighbour
        steps, msg, reduced = n * (n - 1) // 2, size // n, 0
    if n == 1 or steps == 0:
        return Plan(n, (), ((),) * n, (0.0,) * n)
    red = timing.reduction_s(msg)
    d = timing.endpoint_delay_s
    transfers = []
    for k in range(steps):
        for i in range(n):
            if k == 0:
                transfers.append(Transfer(i, (i + 1) % n, msg, (), d))
            else:
                prev = (k - 1) * n + (i - 1) % n  # the message member i received at step k-1
                own = ((k - 1) * n + i,) if timing.receive_with_send else ()  # its own send of step k-1
                delay = d + (red if k - 1 < reduced else 0.0)
                transfers.append(Transfer(i, (i + 1) % n, msg, (prev,), delay, own))
    last = steps - 1
    exit_after = tuple(((last * n + (i - 1) % n),) for i in range(n))
    exit_sent = tuple(((last * n + i),) for i in range(n)) if timing.receive_with_send else ()
    exit_delay = d + (red if last < reduced else 0.0)
    return Plan(n, tuple(transfers), exit_after, (exit_delay,) * n, exit_sent)


COLLECTIVES.register(
    "ring", "Unidirectional ring: all-reduce as 2(N-1) pipelined steps of D/N; RS, AG and A2A variants",
    "ASTRA-sim 2.0 Ring.cc (docs/reference-semantics.md B.2)",
)(Algorithm(frozenset(CollectiveType), ring_plan))
