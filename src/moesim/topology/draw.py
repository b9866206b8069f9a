"""Topology diagrams: one server drawn in full and the cluster around it (docs/study.md §7).

The detailed server shows its CPUs, PCIe switches, GPUs and NICs in tiers (each device under the
PCIe switch or CPU it hangs from), switch–switch, UPI and GPU-mesh links as arcs, an NVSwitch as a
bar under its GPUs, and its NICs' cables to the external fabric. Every other server is a compact box naming its GPUs and cabled to its fabric
switch (at most ``MAX_COMPACT_SERVERS`` boxes; larger clusters end with a "… more" box). A legend
gives each link kind's bandwidth and delay. Output is SVG or PNG by file suffix, byte-identical for
the same input (fixed SVG hash salt, no dates); SVG text stays text, so every GPU name is searchable.
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch

from moesim.errors import MoesimError
from moesim.topology.model import NodeKind, Topology
from moesim.topology.output import write_output
from moesim.topology.units import human_bandwidth, human_delay

MAX_COMPACT_SERVERS = 63
INCH_PER_UNIT = 0.5
FORMATS = ("svg", "png")

NODE_COLOURS = {
    NodeKind.GPU: "#cfe8b0", NodeKind.CPU: "#cdd9f2", NodeKind.PCIE_SWITCH: "#f6d7b0",
    NodeKind.NIC: "#f4c2c2", NodeKind.SWITCH: "#d9d9d9", NodeKind.NVSWITCH: "#d7cdee",
}
NODE_LABELS = {
    NodeKind.GPU: "GPU", NodeKind.CPU: "CPU", NodeKind.PCIE_SWITCH: "PCIe switch",
    NodeKind.NIC: "NIC", NodeKind.SWITCH: "external switch", NodeKind.NVSWITCH: "NVSwitch (GPU interconnect)",
}
LINK_COLOURS = {"pcie": "#4C72B0", "p2p": "#DD8452", "upi": "#C44E52", "fabric": "#55A868", "nvlink": "#8172B3"}
LINK_LABELS = {
    "pcie": "PCIe (GPU/NIC ↔ CPU or PCIe switch)", "p2p": "PCIe switch ↔ PCIe switch", "upi": "UPI (CPU ↔ CPU)",
    "fabric": "NIC ↔ switch, switch ↔ switch", "nvlink": "GPU ↔ GPU or NVSwitch (NVLink, Infinity Fabric)",
}
_DEV_W, _DEV_H = 0.8, 1.5      # GPU / NIC boxes (names written vertically)
_SW_H, _CPU_W = 0.8, 2.2
_COMPACT_W, _LINE_H = 3.4, 0.42


@dataclass
class _Box:
    x: float
    y: float
    w: float
    h: float


def _server_layout(topo: Topology, server: int) -> dict[str, _Box]:
    """Boxes of one server's devices: devices at the bottom, PCIe switches above, CPUs on top."""
    nodes = [n for n in topo.nodes if n.server == server]
    kind = {n.name: n.kind for n in nodes}
    nbrs: dict[str, list[str]] = defaultdict(list)
    for link in topo.links:
        if link.src in kind and link.dst in kind:
            nbrs[link.src].append(link.dst)

    def first(name: str, k: NodeKind) -> str | None:
        return next((v for v in nbrs[name] if kind[v] == k), None)

    devices = [n.name for n in nodes if n.kind in (NodeKind.GPU, NodeKind.NIC)]
    psws = [n.name for n in nodes if n.kind == NodeKind.PCIE_SWITCH]
    cpus = [n.name for n in nodes if n.kind == NodeKind.CPU]
    parent = {d: first(d, NodeKind.PCIE_SWITCH) or first(d, NodeKind.CPU) for d in devices}
    parent.update({p: first(p, NodeKind.CPU) for p in psws})

    order: list[str] = []
    groups: list[str | None] = []

    def add_children(p: str | None) -> None:
        for k in (NodeKind.GPU, NodeKind.NIC):
            for d in devices:
                if parent[d] == p and kind[d] == k and d not in order:
                    order.append(d)
                    groups.append(p)

    for cpu in cpus:
        for psw in psws:
            if parent[psw] == cpu:
                add_children(psw)
        add_children(cpu)
    for psw in psws:
        add_children(psw)
    add_children(None)

    x, prev = 0.0, object()
    xs: dict[str, float] = {}
    for d, g in zip(order, groups, strict=True):
        if xs and g != prev:
            x += 0.5
        xs[d], prev, x = x, g, x + 1.0
    gpu_arcs = max((_arc_height(abs(xs[a] - xs[b])) for a in xs for b in nbrs[a]
                    if b in xs and kind[a] == kind[b] == NodeKind.GPU), default=0.0)  # a GPU mesh's arcs
    y_psw = _DEV_H / 2 + 1.6 + gpu_arcs + (0.4 if gpu_arcs else 0.0)
    boxes = {d: _Box(xs[d], 0.0, _DEV_W, _DEV_H) for d in order}

    def centre(children: list[str], default: float) -> tuple[float, float]:
        cx = [xs[c] for c in children if c in xs]
        return ((min(cx) + max(cx)) / 2, max(cx) - min(cx)) if cx else (default, 0.0)

    for psw in psws:
        cx, span = centre([d for d in order if parent[d] == psw], x + 0.5)
        if psw not in [parent[d] for d in order]:
            x += 2.0
        xs[psw] = cx
        boxes[psw] = _Box(cx, y_psw, max(1.6, span + _DEV_W), _SW_H)
    arc_room = max((_arc_height(abs(xs[a] - xs[b])) for a in psws for b in psws if a < b), default=0.0)
    y_cpu = (y_psw if psws else 0.0) + max(2.4, arc_room + 1.4)
    for cpu in cpus:
        children = [c for c in order + psws if parent.get(c) == cpu]
        cx, _ = centre(children, x + 0.5)
        if not children:
            x += 2.5
        xs[cpu] = cx
        boxes[cpu] = _Box(cx, y_cpu, _CPU_W, _SW_H)
    gpu_x = [xs[d] for d in order if kind[d] == NodeKind.GPU]
    for i, nvs in enumerate(n.name for n in nodes if n.kind == NodeKind.NVSWITCH):  # a bar under the GPUs
        boxes[nvs] = _Box((min(gpu_x) + max(gpu_x)) / 2, -_DEV_H / 2 - 1.0 - 1.2 * i,
                          max(1.6, max(gpu_x) - min(gpu_x) + _DEV_W), _SW_H)
    row = sorted((boxes[c] for c in cpus), key=lambda b: b.x)
    for a, b in zip(row, row[1:], strict=False):  # narrow, then push apart, CPUs that would overlap
        a.w = b.w = max(1.5, min(a.w, b.w, b.x - a.x - 0.3))
        b.x = max(b.x, a.x + a.w + 0.3)
    return boxes


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _arc_height(distance: float) -> float:
    return 0.0 if distance <= 0 else min(0.35 + 0.055 * distance, 2.2)


def _fabric_tiers(topo: Topology) -> list[list[str]]:
    """External switches by tier: tier 0 touches a NIC (leaves), tier 1 the next one up, and so on."""
    switches = [n.name for n in topo.nodes if n.kind == NodeKind.SWITCH]
    kind = {n.name: n.kind for n in topo.nodes}
    tier: dict[str, int] = {}
    for link in topo.links:
        if link.dst in switches and kind[link.src] == NodeKind.NIC:
            tier[link.dst] = 0
    frontier = [s for s in switches if s in tier]
    while frontier:
        nxt = []
        for link in topo.links:
            if link.src in frontier and link.dst in switches and link.dst not in tier:
                tier[link.dst] = tier[link.src] + 1
                nxt.append(link.dst)
        frontier = nxt
    top = max(tier.values(), default=-1)
    for s in switches:
        tier.setdefault(s, top + 1)
    return [[s for s in switches if tier[s] == t] for t in range(max(tier.values(), default=-1) + 1)]


def _link_summary(topo: Topology) -> dict[str, str]:
    values: dict[str, set[tuple[float, float]]] = defaultdict(set)
    for link in topo.links:
        values[link.kind or "pcie"].add((link.bandwidth_bps, link.delay_s))
    out = {}
    for kind in sorted(values, key=lambda k: list(LINK_COLOURS).index(k) if k in LINK_COLOURS else 99):
        pairs = sorted(values[kind])
        text = "; ".join(f"{human_bandwidth(b)}, {human_delay(d)}" for b, d in pairs[:3])
        out[kind] = text + ("; …" if len(pairs) > 3 else "")
    return out


def render_topology(topo: Topology, fmt: str, server: int = 0) -> bytes:
    """The diagram as SVG or PNG bytes."""
    if fmt not in FORMATS:
        raise MoesimError(f"diagram format '{fmt}' (allowed: {', '.join(FORMATS)})")
    if server not in topo.servers:
        raise MoesimError(f"topology {topo.name}: no server {server} (allowed: 0..{topo.num_servers - 1})")
    boxes = _server_layout(topo, server)
    kind = {n.name: n.kind for n in topo.nodes}
    left = min(b.x - b.w / 2 for b in boxes.values()) - 0.6
    right = max(b.x + b.w / 2 for b in boxes.values()) + 0.6
    top = max(b.y + b.h / 2 for b in boxes.values()) + 0.9
    bottom = min(-_DEV_H / 2, min(b.y - b.h / 2 for b in boxes.values())) - 0.5

    cpu_boxes = [boxes[n] for n in boxes if kind[n] == NodeKind.CPU]
    top += max((_arc_height(abs(a.x - b.x)) for a in cpu_boxes for b in cpu_boxes), default=0.0)

    # compact boxes for the other servers, to the right of the detailed one, top-aligned with it
    others = [s for s in topo.servers if s != server]
    shown, hidden = others[:MAX_COMPACT_SERVERS], others[MAX_COMPACT_SERVERS:]
    per_server: dict[int, list[str]] = defaultdict(list)
    for g in topo.gpus:
        per_server[g.server].append(g.name)
    compact: dict[int, _Box] = {}
    if shown:
        g_max = max(len(per_server[s]) for s in shown)
        per_row = 1 if g_max == 1 else 2
        cw = _COMPACT_W if per_row == 2 else 2.0
        h = 0.8 + _LINE_H * math.ceil(g_max / per_row)
        n_boxes = len(shown) + (1 if hidden else 0)
        cols = min(n_boxes, max(1, math.ceil(math.sqrt(n_boxes * h / cw * 2.5))))
        rows = math.ceil(n_boxes / cols)
        x0, y_top = right + 1.5, top - 0.6
        for i, s in enumerate(shown + ([-1] if hidden else [])):
            r, c = divmod(i, cols)
            compact[s] = _Box(x0 + c * (cw + 0.4) + cw / 2, y_top - r * (h + 0.4) - h / 2, cw, h)
        right = x0 + cols * (cw + 0.4)
        bottom = min(bottom, y_top - rows * (h + 0.4) - 0.3)

    # external fabric below everything (NICs are the servers' bottom tier): leaves first, then spines
    tiers = _fabric_tiers(topo)
    for t, names in enumerate(tiers):
        y = bottom - 1.6 - 1.6 * t
        span = right - left
        for i, name in enumerate(names):
            boxes[name] = _Box(left + span * (i + 0.5) / len(names), y, max(1.6, len(name) * 0.22 + 0.6), _SW_H)
    if tiers:
        bottom -= 1.6 * len(tiers) + 0.6

    width_u, height_u = right - left, top - bottom
    fig_w, fig_h = width_u * INCH_PER_UNIT + 0.6, height_u * INCH_PER_UNIT + 2.0
    fig = Figure(figsize=(fig_w, fig_h))
    ax = fig.add_axes((0.3 / fig_w, 1.0 / fig_h, width_u * INCH_PER_UNIT / fig_w, height_u * INCH_PER_UNIT / fig_h))
    ax.set_xlim(left, right)
    ax.set_ylim(bottom, top)
    ax.set_axis_off()

    def box(b: _Box, colour: str, z: float = 2.0, lw: float = 0.8) -> None:
        ax.add_patch(FancyBboxPatch((b.x - b.w / 2, b.y - b.h / 2), b.w, b.h, boxstyle="round,pad=0.03,rounding_size=0.1",
                                    facecolor=colour, edgecolor="#333333", linewidth=lw, zorder=z))

    # the detailed server's frame
    sb = [boxes[n] for n in boxes if kind[n] != NodeKind.SWITCH]
    fx0, fx1 = min(b.x - b.w / 2 for b in sb) - 0.4, max(b.x + b.w / 2 for b in sb) + 0.4
    fy0, fy1 = min(b.y - b.h / 2 for b in sb) - 0.35, top - 0.35
    box(_Box((fx0 + fx1) / 2, (fy0 + fy1) / 2, fx1 - fx0, fy1 - fy0), "#fafafa", z=0.5, lw=1.2)
    ax.text(fx0 + 0.15, fy1 - 0.12, f"server {server} (detailed)", ha="left", va="top", fontsize=8,
            fontweight="bold", zorder=3)

    labelled: set[str] = set()
    cables_into: dict[str, int] = defaultdict(int)

    def cable_down(x: float, y: float, sw: str, colour: str, lw: float, alpha: float = 1.0) -> float:
        """A cable drawn down from (x, y) to the level of switch ``sw``, then across to its side."""
        b = boxes[sw]
        yb = b.y + 0.25 - 0.5 * (cables_into[sw] % 5) / 4
        cables_into[sw] += 1
        xb = b.x - b.w / 2 if x < b.x else b.x + b.w / 2
        if abs(x - b.x) < b.w / 2:
            xb, yb = x, b.y + b.h / 2
        ax.add_line(Line2D([x, x, xb], [y, yb, yb], color=colour, linewidth=lw, alpha=alpha, zorder=1))
        return yb

    def edge(a: str, b: str, k: str) -> None:
        pa, pb = boxes[a], boxes[b]
        colour = LINK_COLOURS.get(k, "#777777")
        if kind[a] == NodeKind.NIC and kind[b] == NodeKind.SWITCH:
            yb = cable_down(pa.x, pa.y, b, colour, 1.1)
            mx, my = pa.x, (pa.y - pa.h / 2 + yb) / 2
        elif abs(pa.y - pb.y) < 1e-9 and kind[a] != NodeKind.SWITCH:
            (a, b, pa, pb) = (a, b, pa, pb) if pa.x < pb.x else (b, a, pb, pa)
            tier = sorted((n for n in boxes if abs(boxes[n].y - pa.y) < 1e-9),
                          key=lambda n: boxes[n].x)
            ia, ib = tier.index(a), tier.index(b)
            spread = 0.35 / max(1, len(tier) - 1)
            xa, xb = pa.x + (ib - ia) * spread * pa.w, pb.x - (ib - ia) * spread * pb.w
            d = xb - xa
            rad = -2 * _arc_height(d) / d
            ya = pa.y + pa.h / 2
            ax.add_patch(FancyArrowPatch((xa, ya), (xb, ya), connectionstyle=f"arc3,rad={rad:.4f}",
                                         arrowstyle="-", color=colour, linewidth=1.1, zorder=1))
            mx, my = (xa + xb) / 2, ya + _arc_height(d)
        else:
            ax.add_line(Line2D([pa.x, pb.x], [pa.y, pb.y], color=colour, linewidth=1.1, zorder=1))
            mx, my = (pa.x + pb.x) / 2, (pa.y + pb.y) / 2
        if k not in labelled:
            labelled.add(k)
            link = topo.links[topo._link_between[(a, b)]]
            ax.text(mx, my, f"{human_bandwidth(link.bandwidth_bps)}\n{human_delay(link.delay_s)}", fontsize=5.5,
                    ha="center", va="center", zorder=4, color=colour,
                    bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.9})

    for fwd, _ in topo.cables():
        link = topo.links[fwd]
        if link.src in boxes and link.dst in boxes:
            edge(link.src, link.dst, link.kind)
    for k, what, colour in ((NodeKind.PCIE_SWITCH, "PCIe switch", "p2p"), (NodeKind.GPU, "GPU", "nvlink")):
        tier = sorted((n for n in boxes if kind[n] == k), key=lambda n: boxes[n].x)
        direct = sum(1 for lk in topo.links if lk.src in tier and lk.dst in tier and kind[lk.dst] == k) // 2
        if len(tier) >= 3 and direct == len(tier) * (len(tier) - 1) // 2:
            b0, b1 = boxes[tier[0]], boxes[tier[-1]]
            ax.text((b0.x + b1.x) / 2, b0.y + b0.h / 2 + _arc_height(b1.x - b0.x) + 0.1,
                    f"full mesh K{len(tier)}: {direct} direct {what} links", ha="center", va="bottom", fontsize=6.5,
                    color=LINK_COLOURS[colour], zorder=4)

    # compact servers and their cables to the fabric
    nic_switches: dict[int | None, list[str]] = defaultdict(list)
    for link in topo.links:
        home = topo.node_by_name[link.src].server
        if kind[link.src] == NodeKind.NIC and kind[link.dst] == NodeKind.SWITCH and link.dst not in nic_switches[home]:
            nic_switches[home].append(link.dst)
    nics_of: dict[int | None, int] = defaultdict(int)
    for n in topo.nodes:
        if n.kind == NodeKind.NIC:
            nics_of[n.server] += 1
    targets = {tuple(nic_switches.get(s, [])) for s in compact if s != -1}
    bundle = len(compact) > 3 and len(targets) == 1 and targets != {()}
    one_row = len({round(b.y, 6) for b in compact.values()}) <= 1
    if compact and bundle:
        # one cable bundle from a frame around the compact servers to their common switch(es)
        cx0 = min(b.x - b.w / 2 for b in compact.values()) - 0.2
        cx1 = max(b.x + b.w / 2 for b in compact.values()) + 0.2
        cy0 = min(b.y - b.h / 2 for b in compact.values()) - 0.2
        cy1 = max(b.y + b.h / 2 for b in compact.values()) + 0.2
        ax.add_patch(FancyBboxPatch((cx0, cy0), cx1 - cx0, cy1 - cy0, boxstyle="round,pad=0.03,rounding_size=0.15",
                                    facecolor="none", edgecolor=LINK_COLOURS["fabric"], linestyle="--",
                                    linewidth=1.0, zorder=0.6))
        cables = sum(nics_of[s] for s in compact if s != -1) + sum(nics_of[s] for s in hidden)
        for sw in next(iter(targets)):
            xm = min(max((cx0 + cx1) / 2, boxes[sw].x + boxes[sw].w / 2 + 0.5), cx1 - 0.5)
            cable_down(xm, cy0, sw, LINK_COLOURS["fabric"], 2.2)
        ax.text(xm + 0.15, cy0 - 0.1, f"{cables} NIC cables from servers "
                f"{others[0]}–{others[-1]}", ha="left", va="top", fontsize=6.5, color=LINK_COLOURS["fabric"], zorder=4)
    for s, b in compact.items():
        box(b, "#f3f3f3")
        if s == -1:
            ax.text(b.x, b.y, f"… {len(hidden)} more servers\n(same as server {server})", ha="center", va="center",
                    fontsize=7, zorder=3)
            continue
        title = f"server {s} · {_plural(nics_of[s], 'NIC')}"
        if not bundle and one_row:
            for sw in nic_switches.get(s, []):
                cable_down(b.x, b.y - b.h / 2, sw, LINK_COLOURS["fabric"], 0.9, alpha=0.8)
        elif not bundle and nic_switches.get(s):
            title += " → " + ", ".join(nic_switches[s])  # several rows: name the switch, skip the tangle
        ax.text(b.x, b.y + b.h / 2 - 0.12, title,
                ha="center", va="top", fontsize=6.5, fontweight="bold", zorder=3)
        per_row = 1 if b.w < _COMPACT_W else 2
        for i, name in enumerate(per_server[s]):
            r, c = divmod(i, per_row)
            ax.text(b.x + (c - (per_row - 1) / 2) * b.w / 2, b.y + b.h / 2 - 0.62 - r * _LINE_H, name, ha="center",
                    va="center", fontsize=6, zorder=3)

    for name, b in boxes.items():
        k = kind[name]
        box(b, NODE_COLOURS[k])
        vertical = k in (NodeKind.GPU, NodeKind.NIC)
        ax.text(b.x, b.y, name, ha="center", va="center", rotation=90 if vertical else 0,
                fontsize=6.5 if vertical else 7, zorder=3)

    summary = _link_summary(topo)
    handles: list[Line2D | Patch] = [Line2D([], [], color=LINK_COLOURS.get(k, "#777777"), linewidth=2, label=f"{LINK_LABELS.get(k, k)}: {v}")
               for k, v in summary.items()]
    present = sorted({n.kind for n in topo.nodes}, key=list(NodeKind).index)
    handles += [Patch(facecolor=NODE_COLOURS[k], edgecolor="#333333", label=NODE_LABELS[k]) for k in present]
    fig.legend(handles=handles, loc="lower center", ncol=min(3, max(1, len(handles) // 2)), fontsize=7,
               frameon=False, bbox_to_anchor=(0.5, 0.05 / fig_h))
    n_nics = len(topo.nodes_of_kind(NodeKind.NIC))
    fabric = topo.meta_value("fabric_description", "no external network" if not tiers else "external fabric")
    delay = topo.meta_value("nic_switch_delay_s")
    subtitle = (f"{topo.num_servers} server{'s' if topo.num_servers != 1 else ''} × "
                f"{_plural(len(per_server[server]), 'GPU')} = {topo.num_gpus} GPUs, {n_nics} NICs, {fabric}")
    if tiers and delay:
        subtitle += f"; NIC–switch delay {human_delay(float(delay))}"
    fig.text(0.5, 1 - 0.3 / fig_h, f"Topology {topo.name}", ha="center", va="top", fontsize=11, fontweight="bold")
    fig.text(0.5, 1 - 0.62 / fig_h, subtitle, ha="center", va="top", fontsize=8)
    if topo.description:
        fig.text(0.5, 1 - 0.88 / fig_h, topo.description, ha="center", va="top", fontsize=7, color="#444444")

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "moesim", "svg.fonttype": "none", "path.simplify": True}):
        if fmt == "svg":
            fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
        else:
            fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    return buf.getvalue()


def draw_topology(topo: Topology, path: str | Path, server: int = 0) -> Path:
    """Write the diagram to ``path`` (.svg or .png), atomically."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise MoesimError(f"{path}: diagram format '{path.suffix}' (allowed: .svg, .png)")
    return write_output(path, render_topology(topo, fmt, server))
