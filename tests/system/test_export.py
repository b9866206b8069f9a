"""`moesim export`: the ASTRA-sim input directory is complete and every file parses back."""

from __future__ import annotations

import json
import subprocess
import sys

from moesim.network.params import NETWORK_MODES
from moesim.system.export import network_config_text
from moesim.topology.catalog import get_topology
from moesim.topology.ns3_export import read_ns3_topology
from moesim.workload.chakra import read_et

MANDATORY_NETWORK_KEYS = {  # docs/reference-semantics.md D.12 and A.3: keys with broken defaults when absent
    "CC_MODE", "ENABLE_QCN", "PACKET_PAYLOAD_SIZE", "L2_CHUNK_SIZE", "L2_ACK_INTERVAL", "L2_BACK_TO_ZERO",
    "EWMA_GAIN", "RP_TIMER", "RATE_AI", "RATE_HAI", "MIN_RATE", "KMAX_MAP", "KMIN_MAP", "PMAX_MAP",
    "BUFFER_SIZE", "TOPOLOGY_FILE", "HAS_WIN", "VAR_WIN", "GLOBAL_T", "U_TARGET",
}


def test_export_directory_is_complete_and_consistent(tmp_path):
    out = tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-m", "moesim.cli", "export", "--model", "deepseek-v4-flash", "--topology", "4",
         "--strategy", "TP4EP8", "--algorithm", "dbt_direct", "--network", "roce_dcqcn", "--out", str(out)],
        capture_output=True, text=True, check=False,
    )
    assert res.returncode == 0, res.stderr
    wl = read_et(out / "workload")
    assert wl.num_ranks == 32 and wl.logical_dims == (4, 8)
    system = json.loads((out / "system.json").read_text())
    assert system["all-reduce-implementation"][0] == "doubleBinaryTree"
    assert system["all-to-all-implementation"][1] == "direct"
    assert system["preferred-dataset-splits"] == 4 and system["scheduling-policy"] == "LIFO"
    assert json.loads((out / "logical_topology.json").read_text()) == {"logical-dims": ["4", "8"]}
    config = dict(line.split(" ", 1) for line in (out / "network.txt").read_text().splitlines())
    assert MANDATORY_NETWORK_KEYS <= set(config)
    assert config["CC_MODE"] == "1" and config["ENABLE_QCN"] == "1"
    topo = get_topology("4", nic_switch_delay_s=NETWORK_MODES["roce_dcqcn"].transport.nic_switch_delay_s)
    rates = {int(link.bandwidth_bps) for link in topo.links}
    kmax = config["KMAX_MAP"].split()
    assert rates <= {int(kmax[i]) for i in range(1, len(kmax), 2)}  # every port rate has an ECN entry
    ns3 = read_ns3_topology(out / "topology.txt")
    assert ns3.to_networkx().number_of_edges() == len(topo.links) // 2
    assert "ns3.42-AstraSimNetwork-default" in (out / "README.md").read_text()
    policy = json.loads((out / "cc_policy.json").read_text())
    assert [0, 1] in policy["no_cc_pairs"] and [0, 8] not in policy["no_cc_pairs"]


def test_the_ecn_maps_carry_the_unmapped_512_gbps_reading_used():
    """The exported config states the 512 Gb/s thresholds moesim used, so ASTRA-sim reproduces them
    whatever its build: scaled (1024/4096 KB) by default, 0/0 with ecn_unmapped_rate=zero."""
    topo = get_topology("3")

    def maps(unmapped: str) -> tuple[dict[int, str], dict[int, str]]:
        params = NETWORK_MODES["roce_dcqcn"].with_overrides({"ecn_unmapped_rate": unmapped})
        config = dict(line.split(" ", 1) for line in network_config_text(params, topo).splitlines())
        out = []
        for key in ("KMIN_MAP", "KMAX_MAP"):
            f = config[key].split()
            out.append({int(f[i]): f[i + 1] for i in range(1, len(f), 2)})
        return out[0], out[1]

    kmin, kmax = maps("scale")
    assert (kmin[512_000_000_000], kmax[512_000_000_000]) == ("1024", "4096")
    kmin, kmax = maps("zero")
    assert (kmin[512_000_000_000], kmax[512_000_000_000]) == ("0", "0")
    assert (kmin[400_000_000_000], kmax[400_000_000_000]) == ("800", "3200")
