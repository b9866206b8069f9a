"""`moesim topology ...`: list, show, draw and export server topologies (built-in "1".."6" or a YAML file)."""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import typer

from moesim.errors import MoesimError
from moesim.schema import default_of
from moesim.system.spec import RunSpec

EXPORT_FORMATS = ("astra-ns3", "yaml")

topology_app = typer.Typer(
    name="topology",
    help="Server topologies: the six study topologies (1..6), server templates (hgx-h100:4, ...) or a YAML file.",
    no_args_is_help=True,
)

_T = typer.Argument(..., help="A topology name (1..6), a server template NAME[:SERVERS[:FABRIC]] (e.g. hgx-h100:4, "
                               "mi300x:16:ls3; see `moesim topology list`) or the path of a topology YAML file.")
_NETWORK = typer.Option(default_of(RunSpec, "network"), "--network", help="Network mode; sets the NIC–switch delay (IB 0.7 µs, RoCE 1 µs).")
_JSON = typer.Option(False, "--json", help="Print JSON instead of tables.")


def _nic_delay(network: str) -> float:
    from moesim.network.params import network_mode

    return network_mode(network).transport.nic_switch_delay_s


@topology_app.command("list")
def list_cmd(as_json: bool = _JSON) -> None:
    """List the built-in topologies, the server templates (NAME[:SERVERS[:FABRIC]]) and the fabrics."""
    from moesim.topology import FABRICS, TOPOLOGIES, NodeKind, get_topology
    from moesim.topology.templates import FABRIC_FORMS, SERVER_TEMPLATES

    rows: list[dict[str, Any]] = []
    for entry in TOPOLOGIES:
        topo = get_topology(entry.name)
        rows.append({"name": entry.name, "kind": "study", "gpu": None, "servers": topo.num_servers, "gpus": topo.num_gpus,
                     "nics": len(topo.nodes_of_kind(NodeKind.NIC)), "description": entry.description,
                     "reference": entry.reference})
    for tmpl in SERVER_TEMPLATES:
        server = tmpl.obj.server
        rows.append({"name": tmpl.name, "kind": "template", "gpu": tmpl.obj.gpu, "servers": 1, "gpus": len(server.gpus),
                     "nics": len(server.nics), "description": tmpl.description, "reference": tmpl.reference})
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    titles = {"study": "Study topologies (docs/study.md §4; or pass the path of a YAML file)",
              "template": f"Server templates: NAME[:SERVERS[:FABRIC]], FABRIC one of {', '.join(FABRIC_FORMS)} "
                          "(default rail); counts per server"}
    for kind, title in titles.items():
        table = Table(title=title)
        for col in ("name", "GPU model", "servers", "GPUs", "NICs", "description", "reference"):
            table.add_column(col)
        for r in rows:
            if r["kind"] == kind:
                table.add_row(r["name"], r["gpu"] or "-", str(r["servers"]), str(r["gpus"]), str(r["nics"]),
                              r["description"], r["reference"])
        console.print(table)
    fabrics = Table(title="Fabrics (YAML fabric.kind)")
    for col in ("kind", "description", "reference"):
        fabrics.add_column(col)
    for fabric in FABRICS:
        fabrics.add_row(fabric.name, fabric.description, fabric.reference)
    console.print(fabrics)


def _summary(topology: str, network: str, gpus_shown: int = 0) -> dict[str, Any]:
    """Everything ``topology show`` prints, as plain values; ``gpus_shown`` > 0 lists only the first
    that many GPUs and the last (``gpus_total`` counts them all)."""
    from moesim.topology import NodeKind, get_topology

    topo = get_topology(topology, _nic_delay(network))
    counts = Counter(n.kind for n in topo.nodes)
    groups: dict[tuple[str, float, float], int] = defaultdict(int)
    for link in topo.links:
        groups[(link.kind, link.bandwidth_bps, link.delay_s)] += 1
    last = topo.num_gpus - 1
    rows = range(topo.num_gpus) if gpus_shown == 0 or gpus_shown >= last else [*range(gpus_shown), last]
    return {
        "name": topo.name, "description": topo.description, "source": topo.meta_value("source"),
        "fabric": topo.meta_value("fabric_description"), "gpu_domain": topo.meta_value("gpu_domain"),
        "devices": {k.value: counts[k] for k in NodeKind},
        "links": [{"kind": kind, "count": n, "bandwidth_bps": bw, "delay_s": delay}
                  for (kind, bw, delay), n in sorted(groups.items())],
        "gpus": [{"gpu": i, "name": g.name, "server": g.server, "cpu": g.cpu, "pcie_switch": g.pcie_switch,
                  "nic": g.nic, "hops_to_last_gpu": len(topo.route(i, last))}
                 for i, g in ((i, topo.gpus[i]) for i in rows)],
        "gpus_total": topo.num_gpus,
    }


@topology_app.command("show")
def show_cmd(topology: str = _T, network: str = _NETWORK, as_json: bool = _JSON,
             gpus_shown: int = typer.Option(64, "--gpus", min=0,
                                            help="GPU rows shown: the first N and the last (0: all).")) -> None:
    """Summarise a topology: devices, links (bandwidth, delay) and where each GPU sits."""
    from moesim.topology.units import human_bandwidth, human_delay

    info = _summary(topology, network, gpus_shown)
    if as_json:
        typer.echo(json.dumps(info, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]Topology {info['name']}[/bold]: {info['description']}")
    console.print(f"source: {info['source']}; fabric: {info['fabric']}")
    if info["gpu_domain"]:
        console.print(f"GPU domain (per server): {info['gpu_domain']}")
    console.print("devices: " + ", ".join(f"{n} {kind}" for kind, n in info["devices"].items()
                                          if n or kind != "nvswitch"))
    links = Table(title="Links (directed; a cable is two)")
    for col in ("kind", "count", "bandwidth", "delay"):
        links.add_column(col)
    for link in info["links"]:
        links.add_row(link["kind"], str(link["count"]), human_bandwidth(link["bandwidth_bps"]),
                      human_delay(link["delay_s"]))
    console.print(links)
    total = info["gpus_total"]
    shown = "" if len(info["gpus"]) == total else f"; {len(info['gpus'])} of {total} shown, --gpus 0 for all"
    gpus = Table(title=f"GPUs (contiguous placement: rank r on GPU r{shown})")
    for col in ("GPU", "name", "server", "CPU", "PCIe switch", "NIC", f"hops to GPU {total - 1}"):
        gpus.add_column(col)
    for g in info["gpus"]:
        if g["gpu"] == total - 1 and shown:
            gpus.add_row("...", "", "", "", "", "", "")
        gpus.add_row(str(g["gpu"]), g["name"], str(g["server"]), g["cpu"] or "-", g["pcie_switch"] or "-",
                     g["nic"] or "-", str(g["hops_to_last_gpu"]))
    console.print(gpus)


@topology_app.command("draw")
def draw_cmd(
    topology: str = _T,
    out: Path = typer.Option(..., "--out", help="Output file, .svg or .png."),
    server: int = typer.Option(0, "--server", help="The server drawn in detail."),
    network: str = _NETWORK,
) -> None:
    """Draw one server in full and the cluster around it."""
    from moesim.fileio import output_file
    from moesim.topology import get_topology
    from moesim.topology.draw import draw_topology

    output_file(out, "--out")
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
    from moesim.fileio import check_output_folder
    from moesim.topology import (
        get_cluster_spec,
        get_topology,
        load_placement,
        write_cluster_yaml,
        write_ns3_topology,
    )

    if fmt not in EXPORT_FORMATS:
        raise MoesimError(f"--format: unknown format '{fmt}' (allowed: {', '.join(EXPORT_FORMATS)})")
    check_output_folder(out)
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
