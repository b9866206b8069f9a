"""`moesim topology list|show|draw|export`, run as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from moesim.cli import app
from moesim.errors import MoesimError
from moesim.topology import get_topology, load_cluster_yaml, read_ns3_topology

runner = CliRunner()


def test_list_and_show() -> None:
    out = runner.invoke(app, ["topology", "list"])
    assert out.exit_code == 0, out.output
    assert all(f"│ {n} " in out.output for n in "123456")
    out = runner.invoke(app, ["topology", "show", "3", "--network", "roce_dcqcn"])
    assert out.exit_code == 0, out.output
    assert "s0.gpu1" in out.output and "upi" in out.output and "1 µs" in out.output


def test_draw_and_export(tmp_path: Path) -> None:
    out = runner.invoke(app, ["topology", "draw", "5", "--out", str(tmp_path / "t5.svg")])
    assert out.exit_code == 0, out.output
    assert "s1.gpu15" in (tmp_path / "t5.svg").read_text()
    out = runner.invoke(app, ["topology", "export", "5", "--format", "astra-ns3", "--out", str(tmp_path / "run"),
                              "--network", "roce_hpcc"])
    assert out.exit_code == 0, out.output
    parsed = read_ns3_topology(tmp_path / "run" / "topology.txt")
    assert parsed.num_hosts == 32 and {lk.delay_s for lk in parsed.links} == {0.2e-6, 0.1e-6, 2e-6, 1e-6}
    out = runner.invoke(app, ["topology", "export", "5", "--format", "yaml", "--out", str(tmp_path / "y")])
    assert out.exit_code == 0, out.output
    spec = load_cluster_yaml(tmp_path / "y" / "topology.yaml")
    assert get_topology(str(tmp_path / "y" / "topology.yaml")).links == get_topology("5").links
    assert spec.num_servers == 2


def test_user_errors_are_moesim_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("servers: 2\nserver: {gpus: [g0]}\nfabric: {kind: single_switch, color: red}\n")
    for args, expected in [
        (["draw", "7", "--out", str(tmp_path / "x.svg")], "unknown topology '7'"),
        (["export", "1", "--format", "omnet", "--out", str(tmp_path)], "--format: unknown format 'omnet'"),
        (["show", str(bad)], f"{bad}: field 'fabric.color': unknown key"),
    ]:
        out = runner.invoke(app, ["topology", *args])
        assert isinstance(out.exception, MoesimError) and expected in str(out.exception), out.output


def test_user_error_exits_2_with_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "moesim.cli", "topology", "draw", "7", "--out", str(tmp_path / "x.svg")],
                          capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == ("moesim: error: unknown topology '7' (allowed: 1, 2, 3, 4, 5, 6, "
                                   "gb200-nvl72[:N[:FABRIC]], hgx-b200[:N[:FABRIC]], hgx-h100[:N[:FABRIC]], "
                                   "hgx-h20[:N[:FABRIC]], hgx-h200[:N[:FABRIC]], hgx-h800[:N[:FABRIC]], mi300x[:N[:FABRIC]], star:N, "
                                   "or a path to a .yaml file)")


def test_list_and_show_server_templates() -> None:
    out = runner.invoke(app, ["topology", "list"])
    assert out.exit_code == 0, out.output
    assert all(f"│ {n} " in out.output for n in ("hgx-h100", "hgx-h800", "hgx-b200", "mi300x", "gb200-nvl72", "rail_optimized", "leaf_spine"))
    out = runner.invoke(app, ["topology", "show", "hgx-h100:2"])
    assert out.exit_code == 0, out.output
    assert "GPU domain (per server): NVSwitch, 3600 Gbps per GPU and direction" in out.output
    assert "2 nvswitch" in out.output and "rail-optimized" in out.output
    out = runner.invoke(app, ["topology", "show", "4"])
    assert "nvswitch" not in out.output and "GPU domain" not in out.output
