"""The kernels' view of the CC registry: an id per registered algorithm, its capability flags as tuples
indexed by id, and dispatch functions generated from the registry, so neither kernel names an algorithm.

Ids follow the registry's order (by name) and are assigned when this module is imported, after every
algorithm module has registered itself (``moesim.network.cc`` imports them all). Each dispatch
function is one branch per algorithm, ``if cc == <id>: return <algorithm's function>(...)``, generated
as Python source and compiled by numba into the kernel that calls it (``print(SOURCES["on_ack"])``
shows it); the kernels' cache key covers the algorithm modules (``moesim.network.jit``).
"""

from __future__ import annotations

import linecache
from typing import Any

from moesim.errors import MoesimError
from moesim.network.cc import CC_ALGORITHMS, CcAlgorithm
from moesim.network.jit import helper

ALGORITHMS: tuple[CcAlgorithm, ...] = tuple(entry.obj for entry in CC_ALGORITHMS)
"""Every registered algorithm; its position is its id in the kernels."""
CC_ALGORITHMS.close("the kernels' dispatch is generated from the algorithms registered when "
                    "moesim.network.cc is imported: import the algorithm's module in moesim/network/cc/__init__.py")


def cc_id(algorithm: CcAlgorithm) -> int:
    """The kernels' id of a registered algorithm."""
    for i, registered in enumerate(ALGORITHMS):
        if registered is algorithm:
            return i
    raise MoesimError(f"congestion-control algorithm '{algorithm.name}' is not registered "
                      f"(allowed: {', '.join(a.name for a in ALGORITHMS)})")


NO_CC = cc_id(CC_ALGORITHMS.get("none"))
"""The id of flows the per-flow policy exempts from congestion control."""
USES_CNP = tuple(a.uses_cnp for a in ALGORITHMS)
USES_INT = tuple(a.uses_int for a in ALGORITHMS)
USES_RTT = tuple(a.uses_rtt for a in ALGORITHMS)
N_TIMERS = tuple(len(a.timers) for a in ALGORITHMS)

_SIGNATURES = {
    "init": ("st, hops, p, line_rate", "None"),
    "on_ack": ("st, hops, p, ack", "0"),
    "on_timer": ("st, p, now, timer_id", "0"),
    "timer_time": ("st, timer_id", "-1.0"),
    "next_rate_change": ("st", "-1.0"),
}
"""Each dispatched function's arguments after the id, and what an unknown id returns."""

SOURCES: dict[str, str] = {}
"""The generated source of each dispatch function."""


def _generate(function: str) -> Any:
    args, default = _SIGNATURES[function]
    lines = [f"def cc_{function}(cc, {args}):"]
    for i, algorithm in enumerate(ALGORITHMS):
        lines += [f"    if cc == {i}:  # {algorithm.name}", f"        return {function}_{i}({args})"]
    lines.append(f"    return {default}")
    source = SOURCES[function] = "\n".join(lines) + "\n"
    filename = f"<moesim.network.cc.dispatch cc_{function}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # for tracebacks
    namespace = {f"{function}_{i}": getattr(a, function) for i, a in enumerate(ALGORITHMS)}
    exec(compile(source, filename, "exec"), namespace)
    fn = namespace[f"cc_{function}"]
    fn.__module__ = __name__
    return helper(fn)


cc_init = _generate("init")
cc_on_ack = _generate("on_ack")
cc_on_timer = _generate("on_timer")
cc_timer_time = _generate("timer_time")
cc_next_rate_change = _generate("next_rate_change")
