"""benchmarks/bench_deepep.py's drawn routing: the rows DeepEP's tests send (low-latency: 8 distinct experts
per token, 10 masked entries; normal: top-8 within the top-4 servers), and that the per-pair path of the
normal kernels gives the expected-rows figure when every pair carries the same rows."""

from __future__ import annotations

import argparse

import numpy as np
from helpers import load_benchmark

bench = load_benchmark("bench_deepep")


def test_low_latency_draws_send_each_token_s_rows_but_the_masked_ones():
    """EP8: every sender sends 128·8 rows less its masked entries (10 draws of a (token, slot), so 1 to 10 of
    them), the receivers' rows differ, and a seed repeats its draw bit for bit while another seed differs."""
    ep = 8
    rows = np.asarray(bench.drawn_rows(ep, 0)).reshape(ep, ep)
    sent = rows.sum(axis=1)
    full = bench.LL_TOKENS * bench.TOP_K
    assert np.all((sent >= full - bench.LL_MASKED) & (sent < full))
    assert rows.sum(axis=0).max() > rows.sum(axis=0).min()
    assert bench.drawn_rows(ep, 0) == bench.drawn_rows(ep, 0) != bench.drawn_rows(ep, 1)
    assert bench.transposed(bench.drawn_rows(ep, 0), ep) == tuple(rows.T.ravel().tolist())


def test_normal_draws_send_every_row_and_equal_pairs_give_the_expected_figure():
    """EP16 (2 servers): each sender's 4096 tokens send 8 rows each; and the per-pair path with every pair at
    4096·8/16 rows gives the kernel time of the expected-rows run exactly (same plan, same flows)."""
    ep = 16
    rows = np.asarray(bench.normal_drawn_rows(ep, 0)).reshape(ep, ep)
    assert rows.sum(axis=1).tolist() == [bench.TOKENS * bench.TOP_K] * ep
    args = argparse.Namespace(backend="flow", network="ib_cc0", dataset_splits=1, active_chunks=1,
                              nvlink_bps=160 * 8e9, seed=0)
    equal = (bench.TOKENS * bench.TOP_K // ep,) * (ep * ep)
    assert bench.internode(ep, bench.FP8_TOKEN_BYTES, args, equal) == bench.internode(ep, bench.FP8_TOKEN_BYTES, args)
