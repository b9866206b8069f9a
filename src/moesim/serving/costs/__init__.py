"""Step costs from the simulator: each grid step of a replica is one moesim run, simulated once and cached.

A replica's step runs ``N`` tokens through the model. The grid holds two kinds of runs
(``moesim.workload``: docs/workload.md):

* ``prefill`` at ``T`` tokens (context 0): one prefill pass of T tokens, T on a ×2 grid from 1 to the
  scheduler's token budget;
* ``decode`` at batch ``B`` and context ``C``: one decode step of B sequences over a C-token cache, B on a
  ×2 grid from 1 to the most sequences a step may hold, C in 0, 1024, 4096, … (×4) up to the longest
  request.

Between grid points costs are interpolated linearly (bilinearly for decode). A decode step's cost is linear
in the total context Σ C_i (attention FLOPs and cache bytes both are), so B sequences of mean context C̄
cost what B sequences of context C̄ cost. A step holding prefill tokens (chunks of prompts, perhaps with
decode tokens: continuous batching) costs

    t = [t_prefill(N) − A(N, N², 0)] + A(N, Σ c_i (c_i + o_i), Σ o_i) + [t_decode(B, C̄) − t_decode(B, 0)]

where ``N`` = prefill tokens + B, chunk i has c_i tokens after o_i already cached, and ``A`` is the
attention time of all layers on the roofline, as the workload layer costs it (``attention_work``; FLOPs and
bytes linear in query tokens, query–key pairs and cached tokens read: ``interpolation.AttentionCost``).
The simulated pass treats its N tokens as one sequence (N² pairs): the first bracket, the pass without its
attention, is nearly linear in N and is what is interpolated; the second term puts in the attention of the real chunks, and the last bracket the decode
sequences' cache. Vidur (Agrawal et al., MLSys 2024) models a mixed batch the same way: linear layers
over all tokens, attention per sequence.

The cache is a folder of JSON files named by run id (``moesim.experiments.inputs``: the RunSpec and the
hash of everything the simulation reads), written atomically, so a rerun, or another deployment with the
same replica, reuses every step. Missing steps are simulated in this process (``workers=1``) or on an
executor (``local``, ``ray``).

Modules: ``grid`` (the axes and the run of each step), ``cache`` (the cache and filling it), ``interpolation``
(``StepCosts``, ``AttentionCost``).
"""

from moesim.serving.costs.cache import (
    MAX_STEP_S,
    FillReport,
    Progress,
    StepCache,
    default_cache_dir,
    fill,
    progress_lines,
)
from moesim.serving.costs.grid import (
           CONTEXT_FIRST,
           CONTEXT_RATIO,
           PHASES,
           Grid,
           batch_axis,
           context_axis,
           step_spec,
)
from moesim.serving.costs.interpolation import StepCosts

__all__ = ["CONTEXT_FIRST", "CONTEXT_RATIO", "MAX_STEP_S", "PHASES", "FillReport", "Grid", "Progress", "StepCache",
           "StepCosts", "batch_axis", "context_axis", "default_cache_dir", "fill", "progress_lines", "step_spec"]
