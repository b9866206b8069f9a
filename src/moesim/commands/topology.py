"""`moesim topology ...`: list, show, draw and export server topologies (built-in "1".."6" or a YAML file)."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from moesim.errors import MoesimError

EXPORT_FORMATS = ("astra-ns3", "yaml")

topology_app = typer.Typer(
    name="topology",
    help="Server topologies: the six study topologies (1..6) or a YAML file of your own.",
    no_args_is_help=True,
)

_T = typer.Argument(..., help="A topology name (1..6) or the path of a topology YAML file.")
_NETWORK = typer.Option("ib_cc0", "--network", help="Network mode; sets the NIC–switch delay (IB 0.7 µs, RoCE 1 µs).")


def _nic_delay(network: str) -> float:
    from moesim.network.params import network_mode

    return network_mode(network).nic_switch_delay_s


@topology_app.command("list")
def list_cmd() -> None:
    """List the built-in topologies."""
    from moesim.topology import TOPOLOGIES, NodeKind, get_topology

    table = Table(title="Built-in topologies (or pass the path of a YAML file)")
    for col in ("name", "servers", "GPUs", "NICs", "description", "reference"):
        table.add_column(col)
    for entry in TOPOLOGIES:
        topo = get_topology(entry.name)
        table.add_row(entry.name, str(topo.num_servers), str(topo.num_gpus),
                      str(len(topo.nodes_of_kind(NodeKind.NIC))), entry.description, entry.reference)
    Console().print(table)


@topology_app.command("show")
def show_cmd(topology: str = _T, network: str = _NETWORK,
             gpus_shown: int = typer.Option(64, "--gpus", min=0,
                                            help="GPU rows shown: the first N and the last (0: all).")) -> None:
    """Summarise a topology: devices, links (bandwidth, delay) and where each GPU sits."""
    from moesim.topology import NodeKind, get_topology
    from moesim.topology.units import human_bandwidth, human_delay

    topo = get_topology(topology, _nic_delay(network))
    console = Console()
    console.print(f"[bold]Topology {topo.name}[/bold]: {topo.description}")
    console.print(f"source: {topo.meta_value('source')}; fabric: {topo.meta_value('fabric_description')}")
    counts = Counter(n.kind for n in topo.nodes)
    console.print("devices: " + ", ".join(f"{counts[k]} {k.value}" for k in NodeKind))
    links = Table(title="Links (directed; a cable is two)")
    for col in ("kind", "count", "bandwidth", "delay"):
        links.add_column(col)
    groups: dict[tuple[str, float, float], int] = defaultdict(int)
    for link in topo.links:
        groups[(link.kind, link.bandwidth_bps, link.delay_s)] += 1
    for (kind, bw, delay), n in sorted(groups.items()):
        links.add_row(kind, str(n), human_bandwidth(bw), human_delay(delay))
    console.print(links)
    n = topo.num_gpus
    rows = list(range(n)) if gpus_shown == 0 or gpus_shown + 1 >= n else [*range(gpus_shown), n - 1]
    shown = "" if len(rows) == n else f"; {len(rows)} of {n} shown, --gpus 0 for all"
    gpus = Table(title=f"GPUs (contiguous placement: rank r on GPU r{shown})")
    for col in ("GPU", "name", "server", "CPU", "PCIe switch", "NIC", f"hops to GPU {n - 1}"):
        gpus.add_column(col)
    for i in rows:
        if i == n - 1 and len(rows) < n:
            gpus.add_row("...", "", "", "", "", "", "")
        g = topo.gpus[i]
        gpus.add_row(str(i), g.name, str(g.server), g.cpu or "-", g.pcie_switch or "-", g.nic or "-",
                     str(len(topo.route(i, n - 1))))
    console.print(gpus)


@topology_app.command("draw")
def draw_cmd(
    topology: str = _T,
    out: Path = typer.Option(..., "--out", help="Output file, .svg or .png."),
    server: int = typer.Option(0, "--server", help="The server drawn in detail."),
    network: str = _NETWORK,
) -> None:
    """Draw one server in full and the cluster around it."""
    from moesim.topology import get_topology
    from moesim.topology.draw import draw_topology

    path = draw_topology(get_topology(topology, _nic_delay(network)), out, server=server)
    typer.echo(f"wrote {path}")


@topology_app.command("export")
def export_cmd(
    topology: str = _T,
    fmt: str = typer.Option("astra-ns3", "--format", help=f"One of: {', '.join(EXPORT_FORMATS)}."),
    out: Path = typer.Option(..., "--out", help="Output directory."),
    network: str = _NETWORK,
    placement: Path | None = typer.Option(None, "--placement", help="A rank → GPU map (JSON/YAML list or mapping)."),
) -> None:
    """Write the topology as an ASTRA-sim NS-3 topology file (topology.txt) or as YAML (topology.yaml)."""
    from moesim.topology import (
        get_cluster_spec,
        get_topology,
        load_placement,
        write_cluster_yaml,
        write_ns3_topology,
    )
    from moesim.topology.output import output_folder

    if fmt not in EXPORT_FORMATS:
        raise MoesimError(f"--format: unknown format '{fmt}' (allowed: {', '.join(EXPORT_FORMATS)})")
    output_folder(out, "--out")
    if fmt == "yaml":
        path = write_cluster_yaml(get_cluster_spec(topology), out / "topology.yaml")
    else:
        topo = get_topology(topology, _nic_delay(network))
        ranks = load_placement(placement, topo) if placement else None
        path = write_ns3_topology(topo, out / "topology.txt", ranks)
    typer.echo(f"wrote {path}")


def register(app: typer.Typer) -> None:
    """Add this group's commands to the root app."""
    app.add_typer(topology_app, name="topology")
