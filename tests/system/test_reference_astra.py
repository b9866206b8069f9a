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
