"""ASTRA-sim 2.0's congestion-unaware analytical runs (docs/reference-runs.md S5/S6), reproduced by the
analytical backend with ``analytical_model = "astra"`` (the ``astra`` network preset) on ``star:N``:
one all-reduce per rank, 4 splits, 1 active chunk, endpoint delay 10 ns, local memory 1600 GB/s,
400 Gb/s links of 500 ns (1000 ns NPU→switch→NPU)."""

from __future__ import annotations

import math

import pytest

from moesim.system.microbench import CollectiveSpec, prepare_collective, run_collective

MIB = 1 << 20


def astra_bench(n: int, algorithm: str, size: int, **overrides: object):
    spec = CollectiveSpec("all_reduce", f"star:{n}", 0, algorithm, "astra", "analytical",
                          tuple(sorted(overrides.items())))
    return run_collective(prepare_collective(spec), size)


# S5: one dimension of N NPUs: (N, size, algorithm, completion ns, first rank done ns)
S5 = [
    (8, MIB, "ring", 94_960, 94_960),
    (8, MIB, "dbt", 141_112, 121_378),
    (8, 64 * MIB, "ring", 2_515_448, 2_515_448),
    (8, 64 * MIB, "dbt", 7_696_774, 6_624_202),
    (16, MIB, "ring", 162_280, 162_280),
    (16, MIB, "dbt", 195_040, 168_565),
    (16, 64 * MIB, "ring", 2_755_660, 2_755_660),
    (16, 64 * MIB, "dbt", 10_640_846, 9_200_265),
    (32, MIB, "ring", 292_804, 292_804),
    (32, MIB, "dbt", 248_968, 215_752),
    (32, 64 * MIB, "ring", 2_972_444, 2_972_444),
    (32, 64 * MIB, "dbt", 13_584_918, 11_776_328),
]


@pytest.mark.parametrize(("n", "size", "algorithm", "last_ns", "first_ns"), S5)
def test_s5_one_dimension(n: int, size: int, algorithm: str, last_ns: int, first_ns: int) -> None:
    r = astra_bench(n, algorithm, size)
    assert r.time_s * 1e9 == pytest.approx(last_ns, abs=0.5)
    assert r.first_done_s * 1e9 == pytest.approx(first_ns, abs=0.5)


@pytest.mark.parametrize(("n", "size"), [(4, 3 * MIB), (8, 5 * MIB), (16, 7 * MIB)])
def test_ring_closed_form(n: int, size: int) -> None:
    """One dimension, ring, chunks one after another: with chunk C = S/K, message m = C/n, link latency
    L (2 hops × 500 ns), B = 50e9 B/s, endpoint delay d = 10 ns and memory bandwidth M = 1.6e12 B/s,
    each chunk takes 2(n−1)·(d + ⌊L + m/B⌋) + (n−1)·3⌊m/M⌋ + d (ns), the collective K times that."""
    splits = 4
    m = size // splits // n
    step_ns = 10 + math.floor(1000 + m / 50)
    chunk_ns = 2 * (n - 1) * step_ns + (n - 1) * 3 * math.floor(m / 1600) + 10
    r = astra_bench(n, "ring", size)
    assert r.time_s * 1e9 == pytest.approx(splits * chunk_ns, abs=0.5)


def dims_bench(dims: tuple[int, ...], algorithm: str, size: int, **overrides: object):
    spec = CollectiveSpec("all_reduce", f"star:{math.prod(dims)}", 0, algorithm, "astra", "analytical",
                          tuple(sorted(overrides.items())), dims)
    return run_collective(prepare_collective(spec), size)


# S6: two dimensions [8, 2], localBWAware: (size, algorithm on both dimensions, completion ns, first rank done ns)
S6 = [
    (MIB, "ring", 95_000, 95_000),
    (MIB, "dbt", 313_484, 293_750),
    (64 * MIB, "ring", 2_515_488, 2_515_488),
    (64 * MIB, "dbt", 17_076_318, 16_003_746),
]


@pytest.mark.parametrize(("size", "algorithm", "last_ns", "first_ns"), S6)
def test_s6_two_dimensions(size: int, algorithm: str, last_ns: int, first_ns: int) -> None:
    r = dims_bench((8, 2), algorithm, size)
    assert r.time_s * 1e9 == pytest.approx(last_ns, abs=0.5)
    assert r.first_done_s * 1e9 == pytest.approx(first_ns, abs=0.5)


def _ring_phase_ns(n: int, msg: int, steps: int, reduced: int) -> int:
    """A ring phase of ``steps`` messages of ``msg`` bytes, the first ``reduced`` of them reduced:
    steps·(d + ⌊L + msg/B⌋) + reduced·3⌊msg/M⌋ + d (ns), d = 10, L = 1000, B = 50 B/ns, M = 1600 B/ns."""
    return steps * (10 + math.floor(1000 + msg / 50)) + reduced * 3 * math.floor(msg / 1600) + 10


@pytest.mark.parametrize(("dims", "size"), [((8, 2), 3 * MIB), ((4, 2), 5 * MIB), ((4, 4), 2 * MIB)])
def test_two_dimension_ring_closed_form(dims: tuple[int, int], size: int) -> None:
    """localBWAware over [n0, n1]: each chunk C = S/K runs reduce-scatter (n0−1 steps of C/n0, reduced)
    and later all-gather (n0−1 steps of C/n0) on dimension 0, and in between an all-reduce over n1. With
    one active chunk, dimension 0 runs K reduce-scatters then K all-gathers back to back while the
    shorter dimension-1 phases hide behind them: K·(RS + AG)."""
    n0, splits = dims[0], 4
    m = size // splits // n0
    rs, ag = _ring_phase_ns(n0, m, n0 - 1, n0 - 1), _ring_phase_ns(n0, m, n0 - 1, 0)
    r = dims_bench(dims, "ring", size)
    assert r.time_s * 1e9 == pytest.approx(splits * (rs + ag), abs=0.5)


def test_baseline_all_reduce_on_every_dimension() -> None:
    """baseline over [8, 2]: a full all-reduce of C on dimension 0, then one of C on dimension 1; the
    dimension-1 phase is shorter, so only the last chunk's shows: K·AR8(C) + AR2(C)."""
    size, splits = 8 * MIB, 4
    chunk = size // splits
    ar8 = _ring_phase_ns(8, chunk // 8, 14, 7)
    ar2 = _ring_phase_ns(2, chunk // 2, 2, 1)
    r = dims_bench((8, 2), "ring", size, collective_optimization="baseline")
    assert r.time_s * 1e9 == pytest.approx(splits * ar8 + ar2, abs=0.5)


def test_one_algorithm_per_dimension() -> None:
    """Over [2, 8] the long phase is dimension 1's: DBT there (ring,dbt) is slower than ring on both,
    DBT on dimension 0 too (dbt) slower still. Over [8, 2] dimension 1's phase hides behind dimension
    0's, so its algorithm does not show."""
    times = {a: dims_bench((2, 8), a, MIB).time_s for a in ("ring", "ring,dbt", "dbt")}
    assert times["ring"] < times["ring,dbt"] < times["dbt"]
    assert dims_bench((8, 2), "ring,dbt", MIB).time_s == dims_bench((8, 2), "ring", MIB).time_s


def test_two_dimension_all_to_all_and_all_gather_closed_forms() -> None:
    """Over [2, 2], K = 4 chunks, one message per phase (d + ⌊L + bytes/B⌋ + d each). All-to-all: C/2 on
    both dimensions, equal phases pipelined across the two: (K + 1) phases. All-gather (dimension 1
    first, a rank's input I = S/4, C = I/K): C on dimension 1 then 2C on dimension 0, the longer
    second phase sets the pace: one first phase + K second ones."""
    size, splits = 1 << 22, 4

    def phase(msg: int) -> int:
        return 10 + math.floor(1000 + msg / 50) + 10

    spec = CollectiveSpec("all_to_all", "star:4", 0, "direct", "astra", "analytical", (), (2, 2))
    chunk = size // splits
    assert run_collective(prepare_collective(spec), size).time_s * 1e9 == pytest.approx(
        (splits + 1) * phase(chunk // 2), abs=0.5)
    spec = CollectiveSpec("all_gather", "star:4", 0, "ring", "astra", "analytical", (), (2, 2))
    chunk = size // 4 // splits
    assert run_collective(prepare_collective(spec), size).time_s * 1e9 == pytest.approx(
        phase(chunk) + splits * phase(2 * chunk), abs=0.5)
