"""`moesim collective`: one collective swept over sizes, printed like nccl-tests (docs/cli.md)."""

from __future__ import annotations

import csv
import json
import re
import sys

import typer

from moesim.errors import MoesimError
from moesim.schema import default_of
from moesim.system.spec import RunSpec

SIZE = re.compile(r"(\d+)([KMG]?)B?", re.IGNORECASE)
SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str, option: str) -> int:
    """nccl-tests' size syntax: bytes with an optional K, M or G (powers of 1024)."""
    m = SIZE.fullmatch(text.strip())
    if m is None:
        raise MoesimError(f"collective: option '{option}': {text!r} is not a size (bytes, or a number with K, M or G)")
    return int(m.group(1)) * SIZE_UNITS[m.group(2).upper()]


def parse_dims(text: str) -> tuple[int, ...]:
    """``8,2`` → (8, 2); empty → ()."""
    if not text.strip():
        return ()
    try:
        return tuple(int(d) for d in text.split(","))
    except ValueError:
        raise MoesimError(f"collective: option '--dims': {text!r} is not a list of integers (e.g. 8,2)") from None


def register(app: typer.Typer) -> None:
    """Add ``moesim collective``."""

    @app.command("collective")
    def collective(
        name: str = typer.Argument(..., help="all_reduce | all_gather | reduce_scatter | all_to_all"),
        topology: str = typer.Option(..., "--topology", help="study topology 1..6, star:N (N hosts on one "
                                                              "400 Gb/s switch), a server template (hgx-h100:4) "
                                                              "or a topology YAML path"),
        ranks: int = typer.Option(0, "--ranks", min=0, help="the first N GPUs take part (0: all)"),
        dims: str = typer.Option("", "--dims", help="logical dimensions, fastest first (e.g. 8,2): one phase per "
                                                    "dimension; their product of GPUs take part"),
        algorithm: str = typer.Option("", "--algorithm", help="ring | dbt | direct | halving_doubling (or ASTRA-sim "
                                                               "names), or one per dimension (ring,dbt); default "
                                                               "ring, direct for all_to_all"),
        network: str = typer.Option(default_of(RunSpec, "network"), "--network", help="network mode (ib_cc0, ib_hpcc, roce_hpcc, "
                                                                "roce_dcqcn), as in moesim run, or reference preset "
                                                                "(none: ASTRA-sim's shipped NS-3 config, dcqcn, hpcc; "
                                                                "astra: ASTRA-sim's analytical network)"),
        backend: str = typer.Option(default_of(RunSpec, "backend"), "--backend", help="fluid | packet | flow | analytical"),
        begin: str = typer.Option("32M", "-b", "--minbytes", help="first size (nccl-tests' size; K, M, G = 1024^k)"),
        end: str = typer.Option("32M", "-e", "--maxbytes", help="last size"),
        factor: int = typer.Option(2, "-f", "--stepfactor", help="multiply the size by this between runs"),
        set_: list[str] = typer.Option(None, "--set", help="network or system parameter key=value (repeatable)"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
        as_csv: bool = typer.Option(False, "--csv", help="print CSV rows"),
    ) -> None:
        """Time one collective over sizes, with nccl-tests' algbw and busbw."""
        from moesim.commands.run import parse_set
        from moesim.system.microbench import CollectiveSpec, prepare_collective, run_collective, sizes

        if as_json and as_csv:
            raise MoesimError("collective: options '--json' and '--csv': choose one")
        overrides = parse_set(set_)
        spec = CollectiveSpec(name, topology, ranks, algorithm, network, backend, overrides, parse_dims(dims))
        bench = prepare_collective(spec)
        rows = []
        for size in sizes(parse_size(begin, "-b"), parse_size(end, "-e"), factor):
            r = run_collective(bench, size)
            rows.append({"size_bytes": r.size_bytes, "time_s": r.time_s, "first_done_s": r.first_done_s,
                         "algbw_bytes_per_s": r.algbw_bytes_per_s, "busbw_bytes_per_s": r.busbw_bytes_per_s,
                         **r.counters})
            if not (as_json or as_csv):
                if len(rows) == 1:
                    shape = f" as dims {list(spec.dims)}" if spec.dims else ""
                    typer.echo(f"# {name} over {bench.ranks} ranks{shape} of topology {topology}: {bench.algorithm}, "
                               f"network {network}, backend {backend}")
                    typer.echo("# time: the last rank done; algbw, busbw: GB/s (1e9 bytes per second), as nccl-tests")
                    if bench.caveat:
                        typer.echo(f"# {bench.caveat}")
                _print_row(rows[-1], header=len(rows) == 1)
        if not (as_json or as_csv):
            mean = sum(row["busbw_bytes_per_s"] for row in rows) / len(rows) / 1e9
            typer.echo(f"# Avg bus bandwidth    : {mean:g}")
        if as_json:
            head = {"collective": name, "topology": topology, "ranks": bench.ranks, "dims": list(spec.dims),
                    "algorithm": bench.algorithm, "network": network, "backend": backend,
                    "overrides": dict(overrides)}
            if bench.caveat:
                head["caveat"] = bench.caveat
            typer.echo(json.dumps({**head, "sizes": rows}, sort_keys=True))
        elif as_csv:
            if bench.caveat:
                typer.echo(bench.caveat, err=True)
            fields = list(rows[0])
            writer = csv.DictWriter(sys.stdout, fieldnames=fields, lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)

    def _print_row(row: dict, header: bool) -> None:
        from moesim.system.microbench import COUNTERS

        counters = [c for c in COUNTERS if c in row]
        if header:  # nccl-tests: a '#'-prefixed header of names, then one of units
            typer.echo(f"#{'size':>13} {'time':>12} {'first':>12} {'algbw':>9} {'busbw':>9}"
                       + "".join(f" {c:>11}" for c in counters))
            typer.echo(f"#{'(B)':>13} {'(us)':>12} {'(us)':>12} {'(GB/s)':>9} {'(GB/s)':>9}"
                       + "".join(f" {'':>11}" for _ in counters))
        typer.echo(f"{row['size_bytes']:>14} {row['time_s'] * 1e6:>12.3f} {row['first_done_s'] * 1e6:>12.3f} "
                   f"{row['algbw_bytes_per_s'] / 1e9:>9.2f} {row['busbw_bytes_per_s'] / 1e9:>9.2f}"
                   + "".join(f" {row[c]:>11}" for c in counters))
