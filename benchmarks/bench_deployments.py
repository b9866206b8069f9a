"""Documented DeepSeek-V3 deployments as moesim commands, each beside the figure its operators published.

docs/deployments.md ("Documented deployments") and docs/deployments-measured.md list the same commands with
the source of every input. Each deployment is one ``moesim run`` invocation on the fluid backend; its
figure is tokens per second per server (node): a prefill's tokens / wall / servers, a decode step's
``tokens_per_s`` (batch × tokens per step / wall) / servers. Nothing is fitted to the published figures:
the GPU is the template's data sheet (``gpu=topology``), the NIC per GPU the template's, the precision and
the kernels' efficiency are the cited ones (docs/deployments.md), and batch, prompt and context lengths are
the operators' own description of the run.

    python benchmarks/bench_deployments.py [--quick] [--only NAME[,NAME]] [--list] [--imbalance] [--draws]

Prints a table: deployment, moesim tokens/s per node, published, ratio (moesim / published), and the
run's wall, GPU and exposed-communication times, then how many checked deployments are within ±15 % (a
figure the model cannot be given inputs for is shown, marked, and not checked). ``--imbalance`` prints the
per-layer imbalance SGLang's published expert loads leave after its EPLB instead. SGLang's prefills route as
those loads, so each simulates every MoE layer (about 30 CPU-minutes each; the whole bench about 2 hours).
"""

from __future__ import annotations

import argparse
import os
import shlex
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from moesim.commands.run import normal_strategy, parse_set, with_flags
from moesim.system.spec import RunSpec

# DeepSeek's serving precision (open-infra-index, day 6 "Statistics": matrix multiplications and dispatch in
# FP8, core MLA and combine in BF16; DeepSeek-V3 technical report §3.3), DeepGEMM / FlashMLA / FlashAttention-3
# kernel efficiencies (compute_model=measured), the GPU of the server template (its data sheet).
DEEPSEEK_STACK = ("gpu=topology", "expert_dtype=fp8", "dense_dtype=fp8", "attention_dtype=bf16", "kv_dtype=bf16",
                  "dispatch_dtype=fp8", "combine_dtype=bf16", "compute_model=measured", "overlap=two-batch")
STACK = " ".join(f"--set {s}" for s in DEEPSEEK_STACK)
"""The settings every deployment shares, as ``moesim run`` flags (``$STACK`` in the docs)."""
# DeepEP's modes: normal kernels (hierarchical: once per server over RDMA, NVLink forwards) in prefill, on 24
# of the GPU's 132 SMs while in flight (DeepEP README: Buffer.set_num_sms(24); H800 / H100 SXM: 132 SMs),
# low-latency kernels (every row its own RDMA write, no SMs) in decode (docs/overlap.md).
PREFILL_A2A = ("all_to_all_algorithm=hierarchical", "comm_sms=0.18")
DECODE_A2A = "all_to_all_algorithm=low_latency"
# ``--draws``: a decode step's tokens route as draws (docs/routing.md, "Drawn tokens"), as real tokens do: each
# token its own k experts, so each MoE layer's receivers get unequal rows and the low-latency all-to-all waits for
# the most loaded one. Opt-in: every pair then carries its own size and drains at its own time, so the fluid
# shares its rates out again at most once per 0.25 µs (``fluid_drain_step_s``, docs/network-fluid.md: about 0.5 %
# slower than exact drains, which take CPU-hours per step; 20 CPU-minutes for SGLang's EP72 step).
DECODE_DRAWS = ("routing_draws=true", "fluid_drain_step_s=2.5e-7")
# DeepSeek-V3 technical report §5.4.3: the second token predicted by MTP is accepted 85-90 % of the time.
DEEPSEEK_MTP = ("mtp_draft_tokens=1", "mtp_acceptance=0.85")
# The profile's decode figure is the SGLang blog's reading of DeepSeek's trace: it takes the trace as a step with
# MTP (its own comparison run slows attention to the profile's time, "reflecting the slowdown caused by MTP's
# attention mechanism") and counts tokens at "a 60% acceptance rate under MTP"; the profile README states no MTP.
PROFILE_MTP = ("mtp_draft_tokens=1", "mtp_acceptance=0.6")
# DeepSeek day 6: 14.8k output tokens/s per node at an average output speed of 20-22 tokens/s per request, so by
# Little's law 14,800 / 8 / 21 = 88 requests decode on a GPU on average (84-92 over 20-22 tokens/s).
ONLINE_DECODE_PER_GPU = 88
# 32 redundant experts placed by DeepSeek's EPLB (global policy in decode): DeepSeek day 6 (EP144) and SGLang
# (EP72, 288 experts) decode both run them; EP144 and EP72 need them (256 experts do not split over 144 or 72).
REPLICAS = ("redundant_experts=32", "expert_placement=eplb")
# SGLang's prefill runs with the same 32 redundant experts (sgl-project/sglang#6017, prefill command:
# --ep-num-redundant-experts 32); its EPLB takes DeepSeek's hierarchical policy when the 8 expert groups divide
# over the nodes (sglang eplb_algorithms.compute_algorithm: num_groups % num_nodes == 0), as on 4 nodes.
PREFILL_REPLICAS = (*REPLICAS, "eplb_groups=8", "eplb_nodes=4")
EXPERT_DISTRIBUTION = "benchmarks/reference/sglang-expert-distribution"
"""SGLang's published DeepSeek-V3 expert loads (attachment_ep_statistics.zip of sgl-project/sglang#6017, the
``--init-expert-location`` files its runs balance with): tokens per routed expert of the 58 MoE layers."""


def sglang_loads(prompt_len: int) -> tuple[str, ...]:
    """Route as SGLang's published expert loads of its prefill runs at ``prompt_len`` (``EXPERT_DISTRIBUTION``),
    the loads its EPLB placed the experts by: one table row per MoE layer."""
    return ("routing=table", f"routing_table={EXPERT_DISTRIBUTION}/prefill_in{prompt_len}.csv")

ROOT = Path(__file__).resolve().parents[1]

TOLERANCE = 0.15
"""Issue #51's target: every checked deployment within ±15 % of its published figure."""

PROFILE = "https://github.com/deepseek-ai/profile-data (throughput as read in the SGLang blog's tables)"
ONLINE = ("https://github.com/deepseek-ai/open-infra-index/blob/main/202502OpenSourceWeek/"
          "day_6_one_more_thing_deepseekV3R1_inference_system_overview.md")
SGLANG = "https://lmsys.org/blog/2025-05-05-large-scale-ep/"


@dataclass(frozen=True)
class Deployment:
    """One published deployment: its ``moesim run`` arguments and the figure its operators published."""

    name: str
    servers: int
    phase: str  # prefill: input tokens/s per server; decode: output tokens/s per server
    published: float
    source: str
    args: tuple[str, ...]
    quick: bool = False
    # Why the figure cannot be a check of the model, when it cannot (it stays in the table, outside the ±15 %).
    not_modelled: str = ""
    # A decode batch per GPU whose rows split unevenly over the EP pairs (every pair then a flow of its own
    # size, and the fluid backend's step takes hours): (that batch, a lower one, the one ``args`` runs), and
    # ``low_args`` the run at the lower one; the step's wall is taken linear in the batch between the two.
    per_gpu: tuple[int, int, int] = ()
    low_args: tuple[str, ...] = ()

    def command(self, args: tuple[str, ...] = ()) -> str:
        """The ``moesim run`` command line (of ``args``, default the deployment's own)."""
        return "moesim run " + " ".join(shlex.quote(a) for a in (args or self.args))

    def doc_command(self, args: tuple[str, ...] = ()) -> str:
        """The command as docs/deployments-measured.md prints it: the shared settings as ``$STACK``."""
        return self.command(args).replace(STACK, "$STACK")

    def runs(self) -> tuple[tuple[str, ...], ...]:
        """The argument lists simulated for this deployment (the lower batch's first)."""
        return (self.low_args, self.args) if self.low_args else (self.args,)


def _run_args(topology: str, strategy: str, sets: tuple[str, ...], decode: tuple[int, int] | None = None) -> tuple[str, ...]:
    head = ["--model", "deepseek-v3", "--topology", topology, "--strategy", strategy]
    if decode is not None:
        head += ["--phase", "decode", "--batch", str(decode[0]), "--context", str(decode[1])]
    for s in sets:
        head += ["--set", s]
    return tuple(head)


def _prefill(topology: str, gpus: int, prompt_len: int, tokens_per_gpu: int,
             extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """DP attention over every GPU (``DP<g>EP<g>``), each GPU a batch of prompts of one length."""
    prompts = (f"prompt_lengths=[{prompt_len}]", f"prompt_counts=[{tokens_per_gpu // prompt_len}]")
    return _run_args(topology, f"DP{gpus}EP{gpus}", (*DEEPSEEK_STACK, *PREFILL_A2A, *prompts, *extra))


def _decode(topology: str, gpus: int, per_gpu: int, context: int, extra: tuple[str, ...]) -> tuple[str, ...]:
    return _run_args(topology, f"DP{gpus}EP{gpus}", (*DEEPSEEK_STACK, DECODE_A2A, *extra),
                     decode=(per_gpu * gpus, context))


DEPLOYMENTS = (
    # DeepSeek's profile: prefill EP32/TP1, 4K prompts, 16K tokens per GPU, two micro-batches (profile-data
    # README); the SGLang blog reads 62,713 input tokens/s per node from it.
    Deployment("deepseek-profile-prefill", 4, "prefill", 62_713, PROFILE,
               _prefill("hgx-h800:4", 32, 4096, 16_384), quick=True),
    # DeepSeek's online service: prefill units of 4 nodes, EP32/DP32; ~73.7k input tokens/s per node including
    # the 56.3 % that hit the on-disk KV cache: 73.7k × 0.437 = 32.2k computed (the SGLang blog's 32,206). A
    # 24-hour average over a varying load whose prefill batch, prompt lengths and cached prefixes are not
    # published: the command is the profile's, and the figure is shown, not checked.
    Deployment("deepseek-online-prefill", 4, "prefill", 32_206, ONLINE,
               _prefill("hgx-h800:4", 32, 4096, 16_384),
               not_modelled="24-hour average; batch, prompt lengths and cached prefixes unpublished"),
    # DeepSeek's profile: decode EP128/TP1, 128 requests per GPU, 4K context, two micro-batches; SGLang reads
    # 18,598 output tokens/s per node (16 nodes) from it with MTP at 60 % acceptance.
    Deployment("deepseek-profile-decode", 16, "decode", 18_598, PROFILE,
               _decode("hgx-h800:16", 128, 128, 4096, PROFILE_MTP), quick=True),
    # DeepSeek's online service: decode EP144/DP144 on 18 nodes with 32 redundant experts (2 per GPU), MTP.
    # 14.8k output tokens/s per node at an average KV length of 4,989 and 88 requests per GPU (Little's law):
    # stepped at 64 and 128 requests per GPU, linear in between.
    Deployment("deepseek-online-decode", 18, "decode", 14_800, ONLINE,
               _decode("hgx-h800:18", 144, 128, 4989, (*DEEPSEEK_MTP, *REPLICAS)),
               per_gpu=(ONLINE_DECODE_PER_GPU, 64, 128),
               low_args=_decode("hgx-h800:18", 144, 64, 4989, (*DEEPSEEK_MTP, *REPLICAS))),
    # SGLang on 4 × 8 H100 (EP32, DP attention, DeepEP, DeepGEMM, two-batch overlap), 16,384 tokens per GPU:
    # 57,674 / 54,543 / 50,302 input tokens/s per node for 1K / 2K / 4K prompts.
    # Each routes as SGLang's own expert loads for its prompt length say (``sglang_loads``), placed by EPLB.
    Deployment("sglang-prefill-1k", 4, "prefill", 57_674, SGLANG,
               _prefill("hgx-h100:4", 32, 1024, 16_384, (*PREFILL_REPLICAS, *sglang_loads(1024)))),
    Deployment("sglang-prefill-2k", 4, "prefill", 54_543, SGLANG,
               _prefill("hgx-h100:4", 32, 2048, 16_384, (*PREFILL_REPLICAS, *sglang_loads(2048)))),
    Deployment("sglang-prefill-4k", 4, "prefill", 50_302, SGLANG,
               _prefill("hgx-h100:4", 32, 4096, 16_384, (*PREFILL_REPLICAS, *sglang_loads(4096)))),
    # The 4K run with "simulated perfect EPLB" (random experts within group-limited routing): 59,337, uniform
    # routing.
    Deployment("sglang-prefill-4k-balanced", 4, "prefill", 59_337, SGLANG,
               _prefill("hgx-h100:4", 32, 4096, 16_384, PREFILL_REPLICAS), quick=True),
    # SGLang decode on 9 × 8 H100, EP72 (288 experts with EPLB's 32 redundant: 4 per GPU), 256 requests per GPU,
    # 2K inputs, no MTP: 22,282 output tokens/s per node.
    Deployment("sglang-decode-2k", 9, "decode", 22_282, SGLANG, _decode("hgx-h100:9", 72, 256, 2000, REPLICAS),
               quick=True),
)


def with_draws(d: Deployment) -> Deployment:
    """A decode deployment with its tokens drawn (``DECODE_DRAWS`` added to its run); a prefill as it is. Drawn
    rows give every pair its own size anyway, so a ``per_gpu`` deployment runs its own batch."""
    if d.phase != "decode":
        return d
    args = d.args
    if d.per_gpu:
        i = args.index("--batch") + 1
        args = (*args[:i], str(int(args[i]) // d.per_gpu[2] * d.per_gpu[0]), *args[i + 1:])
    return replace(d, args=(*args, *(a for knob in DECODE_DRAWS for a in ("--set", knob))), per_gpu=(), low_args=())


def spec_of(args: tuple[str, ...]) -> RunSpec:
    """The RunSpec ``moesim run`` builds from a deployment's arguments (fluid backend, default algorithm)."""
    ap = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    for flag in ("--model", "--topology", "--strategy", "--phase"):
        ap.add_argument(flag)
    for flag in ("--batch", "--context"):
        ap.add_argument(flag, type=int)
    ap.add_argument("--set", action="append", dest="sets")
    ns = ap.parse_args(list(args))
    overrides = with_flags(parse_set(ns.sets), phase=ns.phase, batch=ns.batch, context_tokens=ns.context)
    return RunSpec(ns.model, ns.topology, normal_strategy(ns.strategy), overrides=overrides)


def time_s(d: Deployment, record: dict[str, Any], low: dict[str, Any] | None = None, key: str = "wall_s") -> float:
    """The run's time ``key`` (wall, GPU or exposed communication); with ``per_gpu`` (``low`` the lower
    batch's summary) the point at the deployment's batch on the line through the two runs' times."""
    if not d.per_gpu:
        return float(record[key])
    assert low is not None
    batch, lo, hi = d.per_gpu
    return float(low[key]) + (float(record[key]) - float(low[key])) * (batch - lo) / (hi - lo)


def per_server(d: Deployment, record: dict[str, Any], low: dict[str, Any] | None = None) -> float:
    """Tokens per second per server of one run's summary: prefill input tokens, decode output tokens (with
    ``per_gpu``: the deployment's batch × tokens per step over the wall between the two runs)."""
    if d.per_gpu:
        tokens_per_step = float(record["parameters"]["decode"].get("tokens_per_step", 1))
        return d.per_gpu[0] * 8 * tokens_per_step / time_s(d, record, low)
    if d.phase == "decode":
        return float(record["tokens_per_s"]) / d.servers
    return float(record["parameters"]["tokens"]) / float(record["wall_s"]) / d.servers


# (file, EP ranks, EPLB groups, EPLB nodes): SGLang's prefill on 4 nodes (hierarchical) and decode on 9 (global).
IMBALANCE_CASES = (("prefill_in1024", 32, 8, 4), ("prefill_in2048", 32, 8, 4), ("prefill_in4096", 32, 8, 4),
                   ("decode_in2000out100", 72, 1, 1))


def layer_imbalance(name: str, ep: int, groups: int, nodes: int) -> list[float]:
    """Per MoE layer of SGLang's expert loads ``name``, max / mean rows per EP rank with its 32 redundant
    experts placed by EPLB (moesim's ``eplb`` placement, ``workload/eplb.py``) from those same loads."""
    from moesim.workload.eplb import rebalance
    from moesim.workload.routing import imbalance, rank_rows, read_table

    table = read_table(str(ROOT / EXPERT_DISTRIBUTION / f"{name}.csv"), 256, 58)
    return [imbalance(rank_rows(row, rebalance(row, ep, 32, groups, nodes))) for row in table]


def print_imbalance() -> None:
    """The routing imbalance SGLang's own expert loads leave after its EPLB, per layer (summary)."""
    print(f"{'expert loads':<22} {'EP':>3} {'EPLB':>12} {'mean':>6} {'median':>6} {'max':>6}  (max/mean rows per rank)")
    for name, ep, groups, nodes in IMBALANCE_CASES:
        ratios = sorted(layer_imbalance(name, ep, groups, nodes))
        policy = f"hier {groups}/{nodes}" if groups > 1 else "global"
        print(f"{name:<22} {ep:>3} {policy:>12} {sum(ratios) / len(ratios):6.3f} "
              f"{ratios[len(ratios) // 2]:6.3f} {ratios[-1]:6.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one prefill and one decode per operator (4 runs)")
    ap.add_argument("--only", default="", help="comma-separated deployment names")
    ap.add_argument("--list", action="store_true", help="print each deployment's command and source, run nothing")
    ap.add_argument("--draws", action="store_true",
                    help=f"decode runs route drawn tokens (--set {' --set '.join(DECODE_DRAWS)}; 20 CPU-minutes to hours per run)")
    ap.add_argument("--imbalance", action="store_true",
                    help="print the per-layer imbalance SGLang's expert loads leave after EPLB, run nothing")
    args = ap.parse_args()
    os.chdir(ROOT)  # the commands name their files relative to the repository
    if args.imbalance:
        print_imbalance()
        return
    chosen = [d for d in DEPLOYMENTS if (not args.quick or d.quick)]
    if args.only:
        names = set(args.only.split(","))
        unknown = names - {d.name for d in DEPLOYMENTS}
        if unknown:
            ap.error(f"--only: unknown {', '.join(sorted(unknown))} (allowed: {', '.join(d.name for d in DEPLOYMENTS)})")
        chosen = [d for d in chosen if d.name in names]
    if args.draws:
        chosen = [with_draws(d) for d in chosen]
    if args.list:
        for d in chosen:
            print(f"{d.name}: {d.published:,.0f} {d.phase} tokens/s per node ({d.source})")
            for args in d.runs():
                print(f"  {d.command(args)}")
        return
    from moesim.system.run import simulate_run

    print(f"{'deployment':<26} {'moesim':>8} {'published':>9} {'ratio':>6} {'wall s':>8} {'GPU s':>7} "
          f"{'exposed s':>9} {'sim s':>6}")
    records: dict[tuple[str, ...], dict[str, Any]] = {}  # deployments compared with two figures run once
    within = shown = 0
    for d in chosen:
        t0 = time.perf_counter()
        for args in d.runs():
            if args not in records:
                records[args] = simulate_run(spec_of(args)).summary()
        record, low = records[d.args], (records[d.low_args] if d.low_args else None)
        value = per_server(d, record, low)
        ratio = value / d.published
        if d.not_modelled:
            shown += 1
        else:
            within += abs(ratio - 1) <= TOLERANCE
        note = f"  (shown, not checked: {d.not_modelled})" if d.not_modelled else ""
        wall, gpu, exposed = (time_s(d, record, low, key) for key in ("wall_s", "gpu_s", "exposed_comm_s"))
        print(f"{d.name:<26} {value:8,.0f} {d.published:9,.0f} {ratio:6.2f} {wall:8.4f} {gpu:7.4f} {exposed:9.4f} "
              f"{time.perf_counter() - t0:6.0f}{note}", flush=True)
    print(f"{within} of {len(chosen) - shown} checked deployments within ±{TOLERANCE:.0%}")


if __name__ == "__main__":
    main()
