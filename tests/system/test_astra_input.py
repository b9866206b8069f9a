"""`moesim astra run`: ASTRA-sim input directories read back and simulated.

Two oracles: a directory written by `moesim export` must give, on the packet backend, the very per-rank
times `moesim run` gives for the same spec (the reader inverts the writer, key by key); and ASTRA-sim's
own microbenchmark ET files with a one-switch NS-3 network must give docs/reference-runs.md S3's
completion times to the ns. Bad inputs give one line naming the file and the key, exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import one_collective
from test_reference_s3 import FIXTURES, REFERENCE_NS, SETTINGS

from moesim.errors import MoesimError
from moesim.network import BACKENDS
from moesim.network.params import NETWORK_MODES, REFERENCE_PRESETS, params_from_ns3_config
from moesim.system.astra_input import (
    AstraPaths,
    find_paths,
    read_inputs,
    read_system_json,
    topology_from_analytical,
    topology_from_ns3,
)
from moesim.system.export import export_run, network_config_text, system_json
from moesim.system.run import simulate as run_simulate
from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec
from moesim.topology.catalog import star_topology
from moesim.topology.ns3_export import write_ns3_topology
from moesim.workload.chakra import write_et
from moesim.workload.graph import CollectiveType, Node, NodeKind, RankGraph, Workload

MODES = ("none", "dcqcn", "hpcc")


def moesim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moesim.cli", *args], capture_output=True, text=True, check=False)


def simulate(paths: AstraPaths, backend: str = "packet") -> list:
    """As `moesim astra run` simulates (layer fast-forward attached when the settings ask)."""
    inputs = read_inputs(paths)
    return run_simulate(inputs.workload, inputs.topology, BACKENDS.get(backend)(inputs.topology, inputs.params),
                        inputs.settings)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[RunSpec, Path]:
    """V4 Flash, topology 3, HPCC, 64 tokens: GPUs share servers, so the per-flow CC policy read from
    cc_policy.json changes the result (0.026243 s without it, 0.026190 s with it). ASTRA-sim inputs run
    with ASTRA-sim's receives and ns-3's NIC bookkeeping, so the run they reproduce asks for both too (the
    export is the same)."""
    spec = RunSpec("deepseek-v4-flash", "3", "TP4EP8", "ring_direct", "roce_hpcc", "packet",
                   (("astra_receives", True), ("nic_model", "ns3"), ("tokens", 64)))
    out = tmp_path_factory.mktemp("export")
    export_run(spec, out)
    return spec, out


@pytest.mark.slow
def test_exported_directory_reproduces_moesim_run_bit_for_bit(exported):
    spec, out = exported
    expected = simulate_run(spec).ranks
    got = simulate(find_paths(out))
    assert [(t.wall_s, t.gpu_s, t.comm_s) for t in got] == [(t.wall_s, t.gpu_s, t.comm_s) for t in expected]


def test_cli_prints_astra_sims_report_lines_and_json(exported):
    _, out = exported
    expected = simulate(find_paths(out))
    text = moesim("astra", "run", str(out))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert len(lines) == len(expected)
    for r, (line, t) in enumerate(zip(lines, expected, strict=True)):
        finish = round(t.wall_s * 1e9)
        assert line == f"sys[{r}] finished, {finish} cycles, exposed communication {finish - round(t.gpu_s * 1e9)} cycles."
    as_json = moesim("astra", "run", str(out), "--json")
    assert as_json.returncode == 0, as_json.stderr
    record = json.loads(as_json.stdout)
    assert [r["wall_s"] for r in record["ranks"]] == [t.wall_s for t in expected]
    assert record["wall_s"] == max(t.wall_s for t in expected)


def test_measured_decode_exports_its_attention_kernels_and_runs_as_moesim_runs_it(tmp_path):
    """Under compute_model=measured a layer's attention is two compute nodes (projections, then the core,
    ``workload.costs._attention``); the exported ET carries both, every one with bytes (ASTRA-sim skips a
    node whose tensor_size is 0), and `moesim astra run` of the directory gives the per-rank times
    `moesim run` gives."""
    spec = RunSpec("qwen3-30b-a3b", "hgx-h800:1", "TP1EP8", "ring_direct", "roce_hpcc", "packet", tuple(sorted({
        "astra_receives": True, "nic_model": "ns3", "phase": "decode", "batch": 16, "context_tokens": 512,
        "compute_model": "measured", "overlap": "two-batch"}.items())))
    export_run(spec, tmp_path)
    paths = find_paths(tmp_path)
    nodes = read_inputs(paths).workload.graphs[0].nodes
    names = [n.name for n in nodes if n.layer == 0 and n.kind is NodeKind.COMPUTE]
    assert names.count("attention_projections") == names.count("attention") == 2  # one pair per micro-batch
    assert all(n.bytes_moved > 0 for n in nodes if n.name.startswith("attention"))
    expected = simulate_run(spec).ranks
    as_json = moesim("astra", "run", str(tmp_path), "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert [r["wall_s"] for r in json.loads(as_json.stdout)["ranks"]] == [t.wall_s for t in expected]


def test_ns3_config_reads_back_what_the_writer_wrote():
    """Every field the NS-3 config carries survives the round trip, for each study mode and preset."""
    topo = star_topology(4, 512e9)
    for params in (*NETWORK_MODES.values(), *REFERENCE_PRESETS.values()):
        back, files = params_from_ns3_config(network_config_text(params, topo), "network.txt")
        assert files["TOPOLOGY_FILE"] == "topology.txt"
        for key in ("cc_mode", "enable_qcn", "has_win", "var_win", "ack_high_prio", "rp_timer_s", "rate_ai_bps",
                    "rate_hai_bps", "min_rate_bps", "buffer_bytes", "pmax", "u_target", "fast_react"):
            assert back.value(key) == pytest.approx(params.value(key), rel=1e-12), (params.name, key)
        for rate in (400e9, 512e9):
            assert back.switch.kmin_bytes(rate) == params.switch.kmin_bytes(rate)
            assert back.switch.kmax_bytes(rate) == params.switch.kmax_bytes(rate)


def s3_directory(root: Path, n: int, mode: str) -> Path:
    """System JSON, NS-3 config and the topology of ``star:n`` written by moesim's own writers."""
    d = root / f"s3_{n}_{mode}"
    d.mkdir(exist_ok=True)
    (d / "system.json").write_text(json.dumps(system_json(SETTINGS)))
    (d / "network.txt").write_text(network_config_text(REFERENCE_PRESETS[mode], star_topology(n)))
    write_ns3_topology(star_topology(n), d / "topology.txt")
    return d


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("collective,n", sorted(REFERENCE_NS))
def test_astra_sim_microbenchmarks_give_reference_s3_to_the_ns(tmp_path, collective, n, mode):
    d = s3_directory(tmp_path, n, mode)
    paths = find_paths(d, workload=str(FIXTURES / collective / f"{n}npus_1MB" / collective))
    got = max(t.wall_s for t in simulate(paths)) * 1e9
    assert round(got) == REFERENCE_NS[(collective, n)][MODES.index(mode)]


def test_unknown_ns3_key_and_unmodelled_value_are_refused():
    with pytest.raises(MoesimError, match=r"network.txt: line 1: field 'PINT_MODE'.*allowed: "):
        params_from_ns3_config("PINT_MODE 1\n", "network.txt")
    with pytest.raises(MoesimError, match=r"field 'NIC_TOTAL_PAUSE_TIME'.*not modelled \(allowed: 0\)"):
        params_from_ns3_config("NIC_TOTAL_PAUSE_TIME 5\n", "network.txt")


def test_system_json_keys_map_onto_settings(tmp_path):
    path = tmp_path / "system.json"
    path.write_text(json.dumps({"endpoint-delay": 20, "peak-perf": 900, "local-mem-bw": 3000,
                                "all-reduce-implementation": ["doubleBinaryTree", "ring"], "roofline-enabled": 1}))
    s = read_system_json(path)
    assert (s.endpoint_delay_s, s.peak_flops, s.mem_bw_bytes_per_s) == (20e-9, 900e12, 3000e9)
    assert s.all_reduce == ("doubleBinaryTree", "ring") and s.roofline


@pytest.mark.parametrize("key,value,allowed", [
    ("local-mem-bw", 0, "float GB/s in [0.001, 1e+06]"), ("local-mem-bw", float("nan"), "GB/s"),
    ("peak-perf", -5, "float TFLOP/s in [0.001, 1e+06]"), ("active-chunks-per-dimension", 0, "int in [1, 1024]"),
    ("preferred-dataset-splits", 10**12, "int in [1, 1024]"), ("endpoint-delay", -1, "float ns in [0, 1e+09]"),
    ("scheduling-policy", "RANDOM", "one of LIFO, FIFO"),
])
def test_system_json_values_out_of_range_are_named_by_the_files_keys(tmp_path, key, value, allowed):
    """The error names the file's own key and its allowed values in the file's unit, not moesim's field."""
    path = tmp_path / "system.json"
    path.write_text(json.dumps({key: value}))
    with pytest.raises(MoesimError) as err:
        read_system_json(path)
    message = str(err.value)
    assert message.startswith(f"{path}: field '{key}': ") and allowed in message and "\n" not in message, message
    assert "peak_flops" not in message and "mem_bw_bytes_per_s" not in message


def test_ns3_and_analytical_values_out_of_range_are_refused(tmp_path):
    with pytest.raises(MoesimError, match=r"line 1: field 'U_TARGET': 'nan' is not allowed \(u_target: float in \(0, 1\]"):
        params_from_ns3_config("U_TARGET nan\n", "network.txt")
    with pytest.raises(MoesimError, match=r"field 'PACKET_PAYLOAD_SIZE': '0' is not allowed"):
        params_from_ns3_config("PACKET_PAYLOAD_SIZE 0\n", "network.txt")
    path = tmp_path / "network.yml"
    for bandwidth, latency, field in ((0, 500, "bandwidth"), (50, -1, "latency")):
        path.write_text(f"topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ {bandwidth} ]\nlatency: [ {latency} ]\n")
        with pytest.raises(MoesimError, match=rf"network.yml: field '{field}': "):
            topology_from_analytical(path)
    topo = tmp_path / "topo.txt"
    topo.write_text("2 1 1\n1\n0 1 0Gbps 0.001ms 0\n")
    with pytest.raises(MoesimError, match=r"topo.txt: line 3: field 'rate': bandwidth 0.0 bit/s is out of range"):
        topology_from_ns3(topo)


def _one_line_error(res: subprocess.CompletedProcess[str], *words: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    for word in words:
        assert word in res.stderr, res.stderr


@pytest.mark.slow
def test_bad_inputs_give_one_line_and_exit_code_2(exported, tmp_path):
    _, out = exported
    system = tmp_path / "system.json"
    system.write_text(json.dumps({**json.loads((out / "system.json").read_text()), "replay-only": 1}))
    _one_line_error(moesim("astra", "run", str(out), "--system-configuration", str(system)),
                    "system.json", "'replay-only'", "scheduling-policy")
    memory = tmp_path / "memory.json"
    memory.write_text(json.dumps({"memory-type": "PER_NODE_MEMORY_EXPANSION"}))
    _one_line_error(moesim("astra", "run", str(out), "--remote-memory-configuration", str(memory)),
                    "memory.json", "'memory-type'", "NO_MEMORY_EXPANSION")
    _one_line_error(moesim("astra", "run", str(out), "--workload-configuration", str(tmp_path / "nothing")),
                    "nothing", "no ET files")
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    _one_line_error(moesim("astra", "run", str(out), "--logical-topology-configuration", str(bad)),
                    "bad.json", "not valid JSON")


MIB = 1 << 20
S6 = {"ring": 95_000, "doubleBinaryTree": 313_484}  # docs/reference-runs.md S6: 1 MiB all-reduce over [8, 2]


@pytest.mark.parametrize("algorithm", sorted(S6))
def test_analytical_yaml_with_two_switch_dimensions_gives_reference_s6(tmp_path, algorithm):
    """ASTRA-sim's analytical network of two Switch dimensions [8, 2] (50 GB/s, 500 ns per link), read from
    its YAML, on the analytical backend: the S6 completion time to the ns."""
    write_et(one_collective(16, CollectiveType.ALL_REDUCE, MIB), tmp_path / "workload", "ar")
    (tmp_path / "network.yml").write_text(
        "topology: [ Switch, Switch ]\nnpus_count: [ 8, 2 ]\nbandwidth: [ 50, 50 ]\nlatency: [ 500, 500 ]\n")
    (tmp_path / "logical.json").write_text(json.dumps({"logical-dims": ["8", "2"]}))
    system = {**system_json(SETTINGS), "all-reduce-implementation": [algorithm, algorithm]}
    (tmp_path / "system.json").write_text(json.dumps(system))
    paths = find_paths(None, workload=str(tmp_path / "workload" / "ar"), system=str(tmp_path / "system.json"),
                       network=str(tmp_path / "network.yml"), logical_topology=str(tmp_path / "logical.json"))
    inputs = read_inputs(paths)
    assert inputs.workload.logical_dims == (8, 2) and inputs.params.analytical.analytical_model == "astra"
    assert round(max(t.wall_s for t in simulate(paths, "analytical")) * 1e9) == S6[algorithm]


def test_analytical_yaml_refuses_other_topologies(tmp_path):
    path = tmp_path / "network.yml"
    path.write_text("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    with pytest.raises(MoesimError, match=r"network.yml: field 'topology': 'Ring' is not modelled \(allowed: Switch\)"):
        topology_from_analytical(path)


@pytest.mark.slow
def test_hosts_do_not_relay_traffic_so_an_nvlink_server_round_trips_too(tmp_path):
    """On hgx-h100:4 a GPU has an NVLink and a PCIe port: shortest paths through another GPU exist, but NS-3
    hosts do not forward, and neither do moesim's GPUs, so the export still gives `moesim run`'s times."""
    spec = RunSpec("deepseek-v4-flash", "hgx-h100:4", "TP4EP8", "ring_direct", "roce_hpcc", "packet",
                   (("astra_receives", True), ("nic_model", "ns3"), ("tokens", 64)))
    export_run(spec, tmp_path)
    inputs = read_inputs(find_paths(tmp_path))
    for a, b in ((0, 9), (3, 30)):
        for route in inputs.topology.routes(a, b):
            assert not any(inputs.topology.links[lid].dst.startswith("h") for lid in route[:-1])
    got = simulate(find_paths(tmp_path))
    assert [t.wall_s for t in got] == [t.wall_s for t in simulate_run(spec).ranks]


@pytest.mark.parametrize("strategy", ["DP16EP16", "TP1EP16"])
def test_flow_round_trip_of_a_rail_cluster_gives_moesim_runs_times(tmp_path, strategy):
    """hgx-h100:2, DP attention and TP1EP: the all-to-all crosses rails between servers, which moesim routes
    over the spines from the source GPU's own NIC. With each PCIe switch's cable to its CPU in the NS-3 file,
    NS-3 (and the reader) could reach rail 1 through CPU 0 in as many hops (4.12 ms instead of 4.09 ms
    under DP16EP16); the export leaves those cables out, so the flow backend gives `moesim run`'s times."""
    spec = RunSpec("qwen3-30b-a3b", "hgx-h100:2", strategy, "ring_direct", "ib_cc0", "flow", (("tokens", 64),))
    export_run(spec, tmp_path)
    got = simulate(find_paths(tmp_path), "flow")
    assert [(t.wall_s, t.gpu_s, t.comm_s) for t in got] == [(t.wall_s, t.gpu_s, t.comm_s)
                                                           for t in simulate_run(spec).ranks]


def test_comm_group_configuration_supplies_the_groups_pg_name_names(tmp_path):
    """ET files whose collectives name communicator groups 1 and 2, and no sidecar file: the groups come
    from --comm-group-configuration (ASTRA-sim's way; the two pairs then all-reduce side by side on a
    non-blocking switch and finish together); without it the pg_name is one line naming the file."""
    graphs = tuple(RankGraph(r, (Node(0, "ar", NodeKind.COLLECTIVE, collective=CollectiveType.ALL_REDUCE,
                                      size_bytes=MIB, group=1 if r < 2 else 2),)) for r in range(4))
    write_et(Workload("groups", graphs, (4,), comm_groups=((1, (0, 1)), (2, (2, 3)))), tmp_path / "et", "g")
    groups = tmp_path / "groups.json"
    (tmp_path / "et" / "g.comm_groups.json").rename(groups)
    d = s3_directory(tmp_path, 4, "none")
    paths = find_paths(d, workload=str(tmp_path / "et" / "g"), comm_groups=str(groups))
    assert read_inputs(paths).workload.comm_groups == ((1, (0, 1)), (2, (2, 3)))
    walls = [t.wall_s for t in simulate(paths)]
    assert walls[0] == walls[1] == walls[2] == walls[3] > 0
    _one_line_error(moesim("astra", "run", str(d), "--workload-configuration", str(tmp_path / "et" / "g")),
                    "g.0.et", "'pg_name'", "communicator group 1")
