"""The simulation key: parameters whose default is the simulation without them are keyed only when set."""

from __future__ import annotations

from moesim.experiments.inputs import KEYED_WHEN_SET, input_hash, resolved_inputs
from moesim.system.spec import RunSpec


def _spec(**overrides: object) -> RunSpec:
    return RunSpec("deepseek-v4-flash", "1", "TP4EP8", "ring_direct", "ib_cc0", "flow", tuple(sorted(overrides.items())))


def test_neutral_defaults_are_left_out_and_set_values_kept() -> None:
    plain = resolved_inputs(_spec())
    for section, names in KEYED_WHEN_SET.items():
        assert not set(names) & set(plain[section]), section
    dims = resolved_inputs(_spec(logical_dims=[4, 8]))
    assert dims["system"]["logical_dims"] == (4, 8)
    decode = resolved_inputs(_spec(phase="decode", batch=8))
    assert decode["workload_options"]["batch"] == 8 and decode["workload_options"]["phase"] == "decode"


def test_a_default_given_explicitly_is_the_same_simulation() -> None:
    assert input_hash(_spec()) == input_hash(_spec(phase="prefill"))
    assert input_hash(_spec()) != input_hash(_spec(logical_dims=[2, 2, 8]))
