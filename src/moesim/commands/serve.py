"""`moesim serve` and `moesim serve search`: requests over time on a deployment, latency and goodput (docs/serving.md)."""

from __future__ import annotations

import functools
import inspect
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from moesim.commands.run import normal_strategy, parse_set
from moesim.errors import MoesimError, input_error
from moesim.schema import default_of
from moesim.serving.config import DEFAULT_OUTPUT, DEFAULT_PROMPT, SchedulerConfig
from moesim.system.spec import ALGORITHMS, RunSpec

RUN = {name: default_of(RunSpec, name) for name in ("algorithm", "network", "backend")}
"""The step runs' defaults, as ``moesim run``'s (``RunSpec``)."""
SCHED = {f: default_of(SchedulerConfig, f) for f in SchedulerConfig.__dataclass_fields__}
"""The scheduler's defaults (``SchedulerConfig``)."""

serve_app = typer.Typer(
    help="Serve requests over time on a deployment: continuous batching on step costs simulated by moesim "
         "(cached), optionally disaggregated; TTFT, TPOT, throughput and goodput under an SLO (docs/serving.md).",
    invoke_without_command=True, no_args_is_help=True,
)

Model = Annotated[str | None, typer.Option("--model", help="model key (moesim models list) or a YAML/config.json path")]
Topology = Annotated[str | None, typer.Option(
    "--topology", help="the cluster: a server template (hgx-h100:4, mi300x:8:ls3), star:N, or a study topology/"
                       "YAML (one replica)")]
Algorithm = Annotated[str, typer.Option("--algorithm", help=" | ".join(ALGORITHMS))]
Network = Annotated[str, typer.Option("--network", help="ib_cc0 | ib_hpcc | roce_hpcc | roce_dcqcn")]
Backend = Annotated[str, typer.Option("--backend", help="backend of the step runs: fluid | flow | packet | analytical")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="parameter override of the step runs, key=value "
                                                                "(repeatable; as moesim run --set)")]
Trace = Annotated[Path | None, typer.Option("--trace", help="requests: a CSV/Parquet file with arrival_s, "
                                                            "prompt_tokens, output_tokens")]
Rate = Annotated[float | None, typer.Option("--rate", help="requests: Poisson arrivals, requests per second")]
Count = Annotated[int, typer.Option("--requests", min=1, help="with --rate: how many requests")]
Prompt = Annotated[str, typer.Option("--prompt", help="with --rate: prompt lengths, fixed:N | uniform:LO:HI | "
                                                      "lognormal:MEDIAN:SIGMA[:MAX] | trace:FILE[:COLUMN]")]
Output = Annotated[str, typer.Option("--output", help="with --rate: output lengths (as --prompt)")]
Seed = Annotated[int, typer.Option("--seed", min=0, help="with --rate: seed of arrivals and lengths")]
Budget = Annotated[int, typer.Option("--token-budget", help="tokens one step may hold (prefill + decode)")]
MaxSeqs = Annotated[int, typer.Option("--max-seqs", help="requests running at once on a replica")]
Chunk = Annotated[int | None, typer.Option("--chunk-tokens", help="chunked prefill: a prompt's tokens per step at "
                                                                  "most (default: whole prompts)")]
Policy = Annotated[str, typer.Option("--policy", help="decode-first (vLLM V1, Sarathi-Serve) | prefill-first "
                                                      "(vLLM V0, SGLang)")]
KvTokens = Annotated[int | None, typer.Option("--kv-tokens", help="KV-cache tokens per replica (default: the memory "
                                                                  "left after the weights)")]
GpuMemory = Annotated[float, typer.Option("--gpu-memory-gb", help="accelerator memory per GPU, decimal GB")]
MemFraction = Annotated[float, typer.Option("--memory-fraction", help="share of the memory for weights and KV cache")]
Arrivals = Annotated[str, typer.Option("--arrivals", help="with --rate: poisson | gamma:CV (gaps of coefficient of "
                                                          "variation CV: > 1 bursty, < 1 regular)")]
Routing = Annotated[str, typer.Option("--routing", help="replica an arriving request joins: least-loaded | "
                                                        "round-robin | random (seeded by --seed)")]
DpRanks = Annotated[int, typer.Option("--dp-ranks", help="data-parallel attention ranks per replica, each with its "
                                                         "own queue and KV cache; a step waits for the slowest")]
Preemption = Annotated[str | None, typer.Option(
    "--preemption", help="recompute | swap: reserve KV as tokens come and preempt the latest-arrived request "
                         "when full (default: reserve whole outputs, never preempt)")]
SwapGbps = Annotated[float, typer.Option("--swap-bandwidth-gbps", help="with --preemption swap: host link per GPU, "
                                                                       "Gbit/s (default PCIe 5.0 x16)")]
PrefixHit = Annotated[float, typer.Option("--prefix-hit-rate", help="share of every prompt found in the prefix cache "
                                                                    "(a trace's prefix_id column takes precedence)")]
MtpDrafts = Annotated[int, typer.Option("--mtp-draft-tokens", help="multi-token prediction: draft tokens per "
                                                                   "decode step (0: none)")]
MtpAccept = Annotated[float, typer.Option("--mtp-acceptance", help="multi-token prediction: acceptance rate of "
                                                                   "each draft token")]
SloTtft = Annotated[str | None, typer.Option("--slo-ttft", help="TTFT limit, e.g. 1s, 500ms")]
SloTpot = Annotated[str | None, typer.Option("--slo-tpot", help="TPOT limit, e.g. 50ms")]
KvBackend = Annotated[str, typer.Option("--kv-backend", help="backend of the KV transfers (disaggregated): flow "
                                                             "(default) | fluid | packet | analytical")]
Cache = Annotated[Path | None, typer.Option("--cache", help="step-cost cache folder (default ~/.cache/moesim/"
                                                            "step-costs, or $MOESIM_CACHE)")]
ExecutorOpt = Annotated[str, typer.Option("--executor", help="where missing steps are simulated: local | ray | dask")]
Address = Annotated[str | None, typer.Option("--address", help="cluster address for --executor ray/dask")]
Out = Annotated[Path | None, typer.Option("--out", help="results store folder: table serving of DIR/results.duckdb "
                                                        "and a Parquet file of requests per row (moesim report DIR)")]
Json = Annotated[bool, typer.Option("--json", help="print one JSON object")]
Quiet = Annotated[bool, typer.Option("--quiet", help="no progress lines on stderr")]


@dataclass(frozen=True)
class Shared:
    """The options ``moesim serve`` and ``moesim serve search`` share, declared once (names, defaults, help):
    ``shared_options`` adds them to both commands' signatures and hands them over as one ``Shared``."""

    model: Model = None
    topology: Topology = None
    algorithm: Algorithm = RUN["algorithm"]
    network: Network = RUN["network"]
    backend: Backend = RUN["backend"]
    set_: SetOpt = None
    trace: Trace = None
    prompt: Prompt = DEFAULT_PROMPT
    output: Output = DEFAULT_OUTPUT
    seed: Seed = 0
    budget: Budget = SCHED["token_budget"]
    max_seqs: MaxSeqs = SCHED["max_seqs"]
    chunk: Chunk = None
    policy: Policy = SCHED["policy"]
    kv_tokens: KvTokens = None
    gpu_memory_gb: GpuMemory = SCHED["gpu_memory_bytes"] / 1e9
    fraction: MemFraction = SCHED["memory_fraction"]
    slo_ttft: SloTtft = None
    slo_tpot: SloTpot = None
    kv_backend: KvBackend = "flow"
    arrivals: Arrivals = "poisson"
    routing: Routing = SCHED["routing"]
    dp_ranks: DpRanks = SCHED["dp_ranks"]
    preemption: Preemption = SCHED["preemption"]
    swap_bandwidth_gbps: SwapGbps = SCHED["swap_bandwidth_bps"] / 1e9
    prefix_hit_rate: PrefixHit = SCHED["prefix_hit_rate"]
    mtp_draft_tokens: MtpDrafts = SCHED["mtp_draft_tokens"]
    mtp_acceptance: MtpAccept = SCHED["mtp_acceptance"]
    cache: Cache = None
    executor: ExecutorOpt = "local"
    address: Address = None
    out: Out = None
    as_json: Json = False
    quiet: Quiet = False


def shared_options(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with the ``Shared`` options after its own (its parameter ``shared`` receives them): the
    signature Typer reads is the command's own options followed by ``Shared``'s fields."""
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "shared"]
    group = list(inspect.signature(Shared, eval_str=True).parameters.values())

    @functools.wraps(command)
    def wrapper(**options: Any) -> None:
        command(**{p.name: options[p.name] for p in own}, shared=Shared(**{p.name: options[p.name] for p in group}))

    wrapper.__signature__ = inspect.Signature(own + group)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in own + group}
    return wrapper


def _ratio(text: str, option: str = "--disaggregate") -> tuple[int, int]:
    parts = text.strip().split(":")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise MoesimError(f"{option} '{text}': expected PREFILL_SERVERS:DECODE_SERVERS, e.g. 2:2")
    return int(parts[0]), int(parts[1])


def _common(o: Shared, trace: Path | None, rate: float | None, count: int) -> tuple[Any, Any, Any]:
    """(requests, scheduler, SLO) from the shared options (``trace``: the requests' file, None for the command
    to draw them); --model and --topology are required."""
    from moesim.serving import Slo, make_requests, parse_duration_s

    for value, name in ((o.model, "--model"), (o.topology, "--topology")):
        if value is None:
            raise typer.BadParameter("required", param_hint=f"'{name}'")
    if trace and o.arrivals != "poisson":
        raise MoesimError("--arrivals: applies to generated requests (--rate), not to a trace")
    requests = (make_requests(trace, rate, count, o.prompt, o.output, o.seed, o.arrivals)
                if trace or rate is not None else None)
    if not 0 < o.gpu_memory_gb < math.inf:
        raise input_error("--gpu-memory-gb", "memory", f"must be a finite number of GB > 0, got {o.gpu_memory_gb!r}")
    swap = o.swap_bandwidth_gbps
    if not 0 < swap < math.inf:
        raise input_error("--swap-bandwidth-gbps", "bandwidth", f"must be a finite number of Gbit/s > 0, got {swap!r}")
    default_bps = SCHED["swap_bandwidth_bps"]
    config = SchedulerConfig(o.budget, o.max_seqs, o.chunk, o.policy, o.kv_tokens, o.gpu_memory_gb * 1e9, o.fraction,
                             swap_bandwidth_bps=default_bps if swap == default_bps / 1e9 else swap * 1e9,
                             routing=o.routing, dp_ranks=o.dp_ranks, preemption=o.preemption,
                             prefix_hit_rate=o.prefix_hit_rate, mtp_draft_tokens=o.mtp_draft_tokens,
                             mtp_acceptance=o.mtp_acceptance,
                             **({"routing_seed": o.seed} if o.routing == "random" else {}))
    slo = Slo(parse_duration_s(o.slo_ttft, "--slo-ttft") if o.slo_ttft is not None else None,
              parse_duration_s(o.slo_tpot, "--slo-tpot") if o.slo_tpot is not None else None)
    return requests, config, slo


def _say(quiet: bool) -> Any:
    return (lambda line: None) if quiet else (lambda line: print(line, file=sys.stderr))


def _t(seconds: float | None, unit: str | None = None) -> str:
    """A time in ms below 1 s, else in s; ``unit`` ("ms" or "s") forces one, so a line keeps one unit."""
    if seconds is None:
        return "–"
    unit = unit or ("ms" if seconds < 1 else "s")
    return f"{seconds * 1e3:.4g} ms" if unit == "ms" else f"{seconds:.4g} s"


def _unit(*seconds: float | None) -> str:
    """The unit of a line of times: ms while all lie below 1 s."""
    return "ms" if all(x is None or x < 1 for x in seconds) else "s"


def _n(value: float | None) -> str:
    return "–" if value is None else f"{value:.4g}"


def unsustained(s: dict[str, Any]) -> str:
    """Why a run's figures are not a steady state, in one line."""
    from moesim.serving.metrics import MIN_WINDOW_REQUESTS, SUSTAIN_TOLERANCE, WARMUP_E2E, WARMUP_MAX_FRACTION

    if s["throughput_rps"] is None:
        return "not a steady state: the window holds no time (every request arrived at once)"
    why = []
    if s["throughput_rps"] < (1 - SUSTAIN_TOLERANCE) * s["achieved_rate_rps"]:
        why.append(f"throughput is {100 * (1 - s['throughput_rps'] / s['achieved_rate_rps']):.0f} % below the "
                   "arrival rate")
    if s["ttft_growth"] is None or s["ttft_growth"] > SUSTAIN_TOLERANCE:
        why.append(f"the mean TTFT grows by {_n(s['ttft_growth'])} s per s of arrivals")
    if s["window_requests"] < MIN_WINDOW_REQUESTS:
        why.append(f"{s['window_requests']} arrivals in the window, fewer than {MIN_WINDOW_REQUESTS}")
    short = (f" (the warm-up, {WARMUP_E2E:g} mean E2E, wanted more than {100 * WARMUP_MAX_FRACTION:g} % of the "
             "arrivals)") if s["warmup_truncated"] else ""
    return (f"not a steady state ({'; '.join(why)}): the deployment does not sustain this rate, or the run is "
            f"too short{short}: give more --requests")


def _print(result: Any) -> None:
    r, s, d = result.record(), result.summary, result.deployment
    replicas = d.replicas()
    typer.echo(f"{d.model}  {d.label()}  ({d.run.backend}, {d.run.algorithm}, {d.run.network})  {d.num_gpus} GPUs, "
               f"{len(replicas)} replica{'s' if len(replicas) != 1 else ''}")
    typer.echo(f"  requests: {result.requests.source}; {s['requests']} requests over {s['duration_s']:.4g} s")
    f = result.fill
    typer.echo(f"  step costs: {f.steps} steps ({f.cached} cached, {f.simulated} simulated, {f.elapsed_s:.1f} s)")
    for kind, g in result.grids.items():
        axes = "; ".join(f"{k} {v[0]}..{v[-1]} ({len(v)})" for k, v in g.describe().items() if v)
        typer.echo(f"    {kind.strategy} on {kind.topology}: {axes}")
    if result.interpolation:
        typer.echo(f"  interpolation error at the {len(result.interpolation)} most used cells: max "
                   f"{100 * r['interpolation_error_max']:.2f} %")
    for name in ("ttft", "tpot", "e2e", "kv_transfer"):
        if s[f"{name}_mean_s"] is not None:
            values = [s[f"{name}_{q}_s"] for q in ("p50", "p90", "p99", "mean")]
            u = _unit(*values)
            typer.echo(f"  {name.upper().replace('_', ' '):12} p50 {_t(values[0], u):>10}  p90 "
                       f"{_t(values[1], u):>10}  p99 {_t(values[2], u):>10}  mean {_t(values[3], u)}")
    typer.echo(f"  steady-state window {s['window_start_s']:.4g}–{s['window_end_s']:.4g} s "
               f"({s['window_requests']} arrivals): arrival rate {_n(s['achieved_rate_rps'])} requests/s "
               f"(offered {_n(s['offered_rate_rps'])}), throughput {_n(s['throughput_rps'])} requests/s, "
               f"{_n(s['output_tokens_per_s'])} output tokens/s")
    if result.slo.given:
        limits = ", ".join(f"{k} ≤ {_t(v)}" for k, v in (("TTFT", result.slo.ttft_s), ("TPOT", result.slo.tpot_s)) if v)
        typer.echo(f"  SLO {limits}: {100 * s['slo_attainment']:.1f} % of all requests met; goodput "
                   f"{_n(s['goodput_rps'])} requests/s, {_n(s['goodput_per_gpu_rps'])} per GPU (completions within "
                   "the SLO per second of the window)")
    if "prefill_tokens" in s:
        parts = [f"{s['prefill_tokens']} prompt tokens prefilled"]
        if "cached_tokens" in s:
            parts.append(f"{s['cached_tokens']} served by the prefix cache")
        if "preemptions" in s:
            parts.append(f"{s['preemptions']} preemptions ({result.config.preemption})")
        typer.echo(f"  {'; '.join(parts)}")
    if not s["sustained"]:
        typer.echo(f"  warning: {unsustained(s)}")
    typer.echo(f"  Little's law: mean requests in the system {_n(s['mean_in_system'])}, arrival rate × mean time "
               f"{_n(s['little_lambda_w'])}; replay {result.replay_s:.2f} s")


@shared_options
def _serve(ctx: typer.Context,
           strategy: Annotated[str | None, typer.Option(
               "--strategy", help="TP<n>EP<m> of every replica (colocated) or of the decode replicas")] = None,
           disaggregate: Annotated[str | None, typer.Option(
               "--disaggregate", help="PREFILL:DECODE servers, e.g. 2:2: separate prefill and decode replicas")] = None,
           prefill_strategy: Annotated[str | None, typer.Option(
               "--prefill-strategy", help="with --disaggregate: the prefill replicas' split (default --strategy)")] = None,
           rate: Rate = None, count: Count = 1000,
           check_points: Annotated[int, typer.Option(
               "--check-points", min=0, help="simulate the N most used grid cells per phase to report the "
                                             "interpolation error (0: none)")] = 2,
           per_request: Annotated[Path | None, typer.Option(
               "--per-request", help="write one row per request to this CSV or Parquet file")] = None,
           workers: Annotated[int, typer.Option("--workers", min=1, help="parallel step simulations (1: in this "
                                                                         "process)")] = 1,
           shared: Shared = Shared()) -> None:
    """Serve requests on one deployment; print latency percentiles, throughput and goodput."""
    if ctx.invoked_subcommand is not None:
        return
    from moesim.fileio import check_output_folder, output_file
    from moesim.serving import Deployment, Executor, StepCache, serve
    from moesim.serving.costs import progress_lines
    from moesim.serving.store import record_serving

    o = shared
    requests, config, slo = _common(o, o.trace, rate, count)
    if strategy is None:
        raise typer.BadParameter("required", param_hint="'--strategy'")
    if requests is None:
        raise MoesimError("requests: give a trace (--trace FILE) or an arrival rate (--rate R requests/s)")
    if prefill_strategy is not None and disaggregate is None:
        raise MoesimError("--prefill-strategy: applies only with --disaggregate")
    if o.out is not None:
        check_output_folder(o.out)
    target = output_file(per_request, "--per-request") if per_request is not None else None
    assert o.model is not None and o.topology is not None
    deployment = Deployment(RunSpec(o.model, o.topology, normal_strategy(strategy), o.algorithm, o.network, o.backend,
                                    parse_set(o.set_)),
                            disaggregate=_ratio(disaggregate) if disaggregate is not None else None,
                            prefill_strategy=prefill_strategy)
    deployment.replicas()  # a split that does not fit is an error before anything is simulated
    say = _say(o.quiet)
    result = serve(deployment, requests, config, slo, cache=StepCache(o.cache), kv_backend=o.kv_backend,
                   executor=Executor(o.executor, workers, o.address), check_points=check_points,
                   progress=progress_lines(say))
    if target is not None:
        _write_table(result.table, target)
    if o.out is not None:
        record_serving(o.out, [(result.record(), result.table)], command=" ".join(["moesim", *sys.argv[1:]]))
    if o.as_json:
        typer.echo(json.dumps(result.record(), sort_keys=True, default=repr))
    else:
        _print(result)


def _write_table(table: Any, target: str) -> None:
    import io

    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from moesim.fileio import write_output

    buf = io.BytesIO()
    if target.lower().endswith(".parquet"):
        pq.write_table(table, buf)
    else:
        pcsv.write_csv(table, buf)
    write_output(target, buf.getvalue())


serve_app.callback()(_serve)


@serve_app.command("search")
@shared_options
def _search(strategies: Annotated[str | None, typer.Option(
                "--strategies", help="comma-separated splits to try (default TP2EP16,TP4EP8,TP8EP4,TP16EP2)")] = None,
            servers: Annotated[str | None, typer.Option(
                "--servers", help="comma-separated server counts to try (default: the topology's)")] = None,
            modes: Annotated[str, typer.Option(
                "--modes", help="colocated, disaggregated or both (comma-separated)")] = "colocated,disaggregated",
            ratios: Annotated[str | None, typer.Option(
                "--ratios", help="prefill:decode server divisions, e.g. 1:3,2:2 (default: all)")] = None,
            rate: Annotated[float | None, typer.Option(
                "--rate", help="the first arrival rate tried (requests/s; default: half a rough capacity); Poisson "
                        "arrivals unless --trace")] = None,
            count: Annotated[int, typer.Option(
                "--requests", min=1, help="requests per rate tried (a longer run gives a tighter capacity)")] = 4000,
            attainment: Annotated[float, typer.Option(
                "--attainment", help="share of requests that must meet the SLO")] = 0.9,
            iterations: Annotated[int, typer.Option(
                "--iterations", min=0, help="bisection steps on the rate after bracketing it")] = 6,
            workers: Annotated[int | None, typer.Option(
                "--workers", min=1, help="parallel step simulations and capacity searches (default: one per CPU; "
                                         "1: in this process)")] = None,
            shared: Shared = Shared()) -> None:
    """Find the deployment with the most goodput per GPU under the SLO: splits × server counts × modes."""
    from moesim.fileio import check_output_folder
    from moesim.serving import Executor, SearchSpace, StepCache, make_requests, search
    from moesim.serving.requests import MAX_REQUESTS
    from moesim.serving.search import CONFIRM_REPEATS
    from moesim.serving.store import record_serving
    from moesim.workload.options import STUDY_STRATEGIES

    o = shared
    first_rate = None if o.trace else rate  # with a trace, --rate is only the first rate tried
    requests, config, slo = _common(o, o.trace, first_rate, count)
    confirm = None
    if o.trace is None:  # generated: the confirming run draws fresh requests, CONFIRM_REPEATS times as many
        if count * CONFIRM_REPEATS > MAX_REQUESTS:
            raise input_error("--requests", "requests", f"at most {MAX_REQUESTS // CONFIRM_REPEATS} for a search (a "
                              f"capacity is confirmed on {CONFIRM_REPEATS} times as many), got {count}")
        requests = make_requests(None, 1.0, count, o.prompt, o.output, o.seed, o.arrivals)
        confirm = make_requests(None, 1.0, count * CONFIRM_REPEATS, o.prompt, o.output, o.seed, o.arrivals)
    if o.out is not None:
        check_output_folder(o.out)
    mode_list = tuple(m.strip() for m in modes.split(",") if m.strip())
    bad = [m for m in mode_list if m not in ("colocated", "disaggregated")]
    if bad or not mode_list:
        raise MoesimError(f"--modes: unknown mode '{bad[0] if bad else modes}' (allowed: colocated, disaggregated)")
    try:
        server_counts = tuple(int(n) for n in servers.split(",")) if servers is not None else ()
    except ValueError:
        raise MoesimError(f"--servers '{servers}': expected comma-separated server counts, e.g. 4,8") from None
    if any(n < 1 for n in server_counts):
        raise MoesimError(f"--servers '{servers}': server counts must be ≥ 1")
    splits = strategies.split(",") if strategies is not None else list(STUDY_STRATEGIES)
    if not all(s.strip() for s in splits):
        raise MoesimError(f"--strategies '{strategies}': expected comma-separated splits, e.g. TP2EP16,TP4EP8")
    assert o.model is not None and o.topology is not None
    space = SearchSpace(
        o.model, o.topology, tuple(normal_strategy(s.strip()) for s in splits), server_counts, mode_list,
        tuple(_ratio(r, "--ratios") for r in ratios.split(",")) if ratios is not None else None,
        o.algorithm, o.network, o.backend, parse_set(o.set_))
    result = search(space, requests, config, slo, attainment=attainment, start_rps=rate,
                    iterations=iterations, cache=StepCache(o.cache), executor=Executor(o.executor, workers, o.address),
                    kv_backend=o.kv_backend, progress=_say(o.quiet), confirm=confirm)
    if o.out is not None:
        record_serving(o.out, result.records(), search_id=result.search_id,
                       command=" ".join(["moesim", *sys.argv[1:]]))
    if o.as_json:
        typer.echo(json.dumps(_search_record(result, slo, attainment), sort_keys=True, default=repr))
        return
    typer.echo(f"{len(result.candidates)} candidates ({len(result.skipped)} combinations left out); step costs: "
               f"{result.fill.steps} steps, {result.fill.simulated} simulated ({result.fill.elapsed_s:.1f} s); "
               f"{result.elapsed_s:.1f} s in all")
    typer.echo(f"  capacity = highest sustained rate with ≥ {100 * attainment:g} % of completions within the SLO; "
               "rates over the steady-state window")
    for reason in result.skipped[:SHOWN_SKIPPED]:
        typer.echo(f"  left out: {reason}")
    if len(result.skipped) > SHOWN_SKIPPED:
        typer.echo(f"  left out: {len(result.skipped) - SHOWN_SKIPPED} more (--json lists every one)")
    for c in result.candidates:
        b = c.best.summary if c.best is not None else None
        if b is None:
            text = "none (no rate tried passed)"
        else:
            text = (f"{'no upper bound found, ≥ ' if c.unbounded else ''}{b['offered_rate_rps']:.4g} req/s offered: "
                    f"arrivals {b['achieved_rate_rps']:.4g}, throughput {b['throughput_rps']:.4g}, goodput "
                    f"{b['goodput_rps']:.4g} req/s")
        limit = c.limited_by(slo, attainment)
        typer.echo(f"  {c.goodput_per_gpu_rps:10.4g} per GPU  {c.deployment.label():60}  {text}"
                   f"{' *' if c.conservative else ''}{f'; limited by {limit}' if limit else ''}")
    if any(c.conservative for c in result.candidates):
        typer.echo("  * the runs are too short to bound this capacity: a rate that failed on --requests requests "
                   f"passed on {CONFIRM_REPEATS} times as many; more --requests may give a higher figure")


SHOWN_SKIPPED = 10
"""Combinations left out that serve search prints (why each was); --json lists them all."""


def _search_record(result: Any, slo: Any, attainment: float) -> dict[str, Any]:
    rows = []
    for c in result.candidates:
        best = c.best.summary if c.best is not None else None
        rows.append({**c.deployment.as_dict(), "gpus": c.deployment.num_gpus,
                     "goodput_per_gpu_rps": c.goodput_per_gpu_rps, "best": best,
                     "capacity_rps": c.best.rate_rps if c.best is not None else None,
                     "upper_bound_found": c.best is not None and not c.unbounded, "conservative": c.conservative,
                     "rates_tried": [e.rate_rps for e in c.evaluations],
                     "limited_by": c.limited_by(slo, attainment), "search_cpu_s": c.cpu_s})
    return {"search_id": result.search_id, "candidates": rows, "skipped": list(result.skipped),
            "step_costs": result.fill.__dict__, "elapsed_s": result.elapsed_s, **result.settings}


def register(app: typer.Typer) -> None:
    """Add ``moesim serve`` and ``moesim serve search``."""
    app.add_typer(serve_app, name="serve")
