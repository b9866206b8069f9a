"""One collective on its own (``moesim collective``): the reference microbenchmarks on the packet backend,
nccl-tests' bandwidth definitions, and the CLI's outputs and errors."""

from __future__ import annotations

import csv
import io
import json

import pytest
from cli_fuzz import run_cli

from moesim.errors import MoesimError
from moesim.system.microbench import (
    CollectiveSpec,
    bus_factor,
    node_size_bytes,
    prepare_collective,
    run_collective,
    sizes,
)
from moesim.topology.catalog import get_topology, star_topology, topology_gpu_count

MIB = 1 << 20


def bench(collective: str, n: int, algorithm: str = "", network: str = "none", size: int = MIB,
          **overrides: object):
    spec = CollectiveSpec(collective, f"star:{n}", 0, algorithm, network, "packet", tuple(sorted(overrides.items())))
    return run_collective(prepare_collective(spec), size)


# docs/reference-runs.md S7 (1 MiB rows; HPCC-shipped = the shipped file with CC_MODE 3): completion and
# first rank done, ns.
S7 = [
    (8, "dbt", {}, 289_101, 254_502),
    (16, "dbt", {}, 413_812, 365_683),
    (8, "dbt", {"cc_mode": 3}, 306_849, 270_806),
    (16, "dbt", {"cc_mode": 3}, 441_203, 391_103),
    (8, "ring", {}, 154_096, 154_096),
    (16, "ring", {}, 287_080, 287_080),
    (8, "ring", {"cc_mode": 3}, 156_112, 156_112),
]


@pytest.mark.parametrize("n, algorithm, overrides, done_ns, first_ns", S7)
def test_s7_all_reduce_on_one_switch_within_a_tenth_of_a_percent(n, algorithm, overrides, done_ns, first_ns):
    r = bench("all_reduce", n, algorithm, **overrides)
    assert r.time_s * 1e9 == pytest.approx(done_ns, rel=1e-3)
    assert r.first_done_s * 1e9 == pytest.approx(first_ns, rel=1e-3)
    assert r.counters["pauses"] == 0 and r.counters["drops"] == 0


# S3 (ASTRA-sim's microbenchmarks, comm_size 1 MiB per rank): nccl-tests' all-gather size is n × that.
S3 = [("reduce_scatter", 8, "none", MIB, 77_908), ("all_gather", 8, "hpcc", 8 * MIB, 230_816),
      ("all_to_all", 16, "dcqcn", MIB, 29_604)]


@pytest.mark.parametrize("collective, n, network, size, done_ns", S3)
def test_s3_collectives_through_the_benchmark(collective, n, network, size, done_ns):
    assert bench(collective, n, network=network, size=size).time_s * 1e9 == pytest.approx(done_ns, rel=1e-3)


def test_bandwidths_follow_nccl_tests_definitions():
    """algbw = size / time; busbw = algbw · 2(n−1)/n for all-reduce, (n−1)/n for the others."""
    r = bench("all_reduce", 8, "ring")
    assert r.algbw_bytes_per_s == MIB / r.time_s
    assert r.busbw_bytes_per_s == pytest.approx(r.algbw_bytes_per_s * 2 * 7 / 8)
    assert bus_factor("all_gather", 4) == bus_factor("all_to_all", 4) == bus_factor("reduce_scatter", 4) == 0.75
    assert node_size_bytes("all_gather", 8 * MIB, 8) == MIB and node_size_bytes("all_reduce", MIB, 8) == MIB


def test_ring_busbw_approaches_the_link_rate_less_headers_on_an_idle_switch():
    """A 256 MiB ring all-reduce on star:4: busbw → 400 Gb/s × payload / (payload + 36 B data headers +
    48 B ACK), as every host's uplink carries its data and its ACKs of the data it receives (one per
    packet), less the steps' latency and ASTRA-sim's reduction time (3 memory passes at 1.6 TB/s,
    about 4 % here): within 8 % of that bound and never above it."""
    bound = 400e9 / 8 * 1000 / (1000 + 36 + 48)
    r = bench("all_reduce", 4, "ring", size=256 * MIB)
    assert 0.92 * bound < r.busbw_bytes_per_s <= bound


def test_the_first_n_gpus_of_a_study_topology_take_part():
    spec = CollectiveSpec("all_to_all", "3", 8, "", "ib_cc0", "flow")
    b = prepare_collective(spec)
    assert b.ranks == 8 and b.algorithm == "direct"
    assert run_collective(b, MIB).time_s > 0


def test_size_sweep_is_geometric_and_inclusive():
    assert sizes(MIB, 8 * MIB, 2) == [MIB, 2 * MIB, 4 * MIB, 8 * MIB]
    assert sizes(1000, 9000, 3) == [1000, 3000, 9000]
    with pytest.raises(MoesimError, match="factor"):
        sizes(1, 8, 1)


@pytest.mark.parametrize("spec, message", [
    (CollectiveSpec("broadcast", "star:8"), "field 'collective'"),
    (CollectiveSpec("all_to_all", "star:8", algorithm="dbt"), "field 'algorithm': dbt does not run all_to_all"),
    (CollectiveSpec("all_reduce", "star:8", ranks=9), "field 'ranks': 9"),
    (CollectiveSpec("all_reduce", "star:1"), "1 hosts is not allowed"),
    (CollectiveSpec("all_reduce", "star:8", overrides=(("tokens", 8),)), "a workload parameter"),
    (CollectiveSpec("all_reduce", "star:8", overrides=(("buffer_bytes", -1),)), "buffer_bytes"),
])
def test_bad_inputs_are_one_line_errors(spec, message):
    with pytest.raises(MoesimError, match=message):
        prepare_collective(spec)


def test_star_topology_is_n_hosts_on_one_switch():
    topo = get_topology("star:6")
    assert topo.num_gpus == topology_gpu_count("star:6") == 6
    assert len(topo.links) == 12 and all(link.kind == "fabric" for link in topo.links)
    assert topo.links == star_topology(6).links and get_topology("star:6") is topo  # built once


def test_cli_table_json_and_csv():
    args = ["collective", "all_reduce", "--topology", "star:4", "-b", "64K", "-e", "256K", "-f", "2",
            "--backend", "flow"]
    code, out, err = run_cli(*args)
    assert code == 0, err
    comments = [line for line in out.splitlines() if line.startswith("#")]
    lines = [line for line in out.splitlines() if not line.startswith("#")]
    assert comments[2].split()[:4] == ["#", "size", "time", "first"] and comments[3].split()[:2] == ["#", "(B)"]
    assert [int(line.split()[0]) for line in lines] == [64 << 10, 128 << 10, 256 << 10]
    code, out, _ = run_cli(*args, "--json")
    record = json.loads(out)
    assert record["ranks"] == 4 and [s["size_bytes"] for s in record["sizes"]] == [64 << 10, 128 << 10, 256 << 10]
    # nccl-tests' footer: the mean bus bandwidth in GB/s over the sizes
    mean = sum(s["busbw_bytes_per_s"] for s in record["sizes"]) / 3 / 1e9
    assert comments[-1].startswith("# Avg bus bandwidth") and float(comments[-1].split(":")[1]) == pytest.approx(mean)
    code, out, _ = run_cli(*args, "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [float(r["time_s"]) for r in rows] == [s["time_s"] for s in record["sizes"]]
    assert [float(r["algbw_bytes_per_s"]) for r in rows] == [s["size_bytes"] / s["time_s"] for s in record["sizes"]]


@pytest.mark.parametrize("args, message", [
    (["-b", "lots"], "option '-b': 'lots' is not a size"),
    (["-b", "2M", "-e", "1M"], "need 1 <= begin <= end"),
    (["--json", "--csv"], "choose one"),
])
def test_cli_errors_exit_2_with_one_line(args, message):
    code, _, err = run_cli("collective", "all_reduce", "--topology", "star:4", "--backend", "flow", *args)
    assert code == 2 and message in err and err.count("\n") == 1, err
