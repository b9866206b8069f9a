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
    mtp = RunSpec("deepseek-v3", "1", "TP4EP8", "ring_direct", "ib_cc0", "flow", ())
    assert resolved_inputs(mtp)["model"]["mtp_layers"] == 1  # set in its catalog entry: keyed
    decode = resolved_inputs(_spec(phase="decode", batch=8))
    assert decode["workload_options"]["batch"] == 8 and decode["workload_options"]["phase"] == "decode"


def test_a_default_given_explicitly_is_the_same_simulation() -> None:
    assert input_hash(_spec()) == input_hash(_spec(phase="prefill"))
    fluid = _on("ib_cc0", "fluid")
    assert "fluid_drain_step_s" not in resolved_inputs(fluid)["network"]
    assert input_hash(fluid) == input_hash(_on("ib_cc0", "fluid", fluid_drain_step_s=0.0))
    assert input_hash(_spec()) != input_hash(_spec(logical_dims=[2, 2, 8]))


def _on(network: str, backend: str, topology: str = "1", **overrides: object) -> RunSpec:
    return RunSpec("deepseek-v4-flash", topology, "TP4EP8", "ring_direct", network, backend,
                   tuple(sorted(overrides.items())))


def test_a_run_is_keyed_on_its_own_algorithm_parameters_only() -> None:
    """A DCQCN timer or a DCQCN-only rate key never changes an HPCC run's key; a key HPCC reads does."""
    hpcc = input_hash(_on("roce_hpcc", "fluid"))
    assert input_hash(_on("roce_hpcc", "fluid", rp_timer_s=1e-4)) == hpcc
    assert input_hash(_on("roce_hpcc", "fluid", rate_hai_bps=2e8)) == hpcc
    assert input_hash(_on("roce_hpcc", "fluid", u_target=0.9)) != hpcc
    assert input_hash(_on("roce_hpcc", "fluid", rate_ai_bps=2e8)) != hpcc
    dcqcn = input_hash(_on("roce_dcqcn", "fluid"))
    assert input_hash(_on("roce_dcqcn", "fluid", u_target=0.9)) == dcqcn
    assert input_hash(_on("roce_dcqcn", "fluid", rp_timer_s=1e-4)) != dcqcn


def test_a_run_is_keyed_on_the_sections_its_backend_reads() -> None:
    """flow reads the transport section only: switch buffers, fluid options and CC parameters are not its
    inputs; fluid reads all three."""
    for backend, reads in (("flow", False), ("fluid", True)):
        base = input_hash(_on("roce_dcqcn", backend))
        for name, value in (("buffer_bytes", 16 * 2**20), ("fluid_window", "bytes"), ("rp_timer_s", 1e-4),
                            ("fluid_drain_step_s", 2.5e-7)):
            assert (input_hash(_on("roce_dcqcn", backend, **{name: value})) != base) == reads, (backend, name)
        assert input_hash(_on("roce_dcqcn", backend, packet_payload_bytes=2000)) != base


def test_without_cc_flows_no_cc_only_field_is_keyed() -> None:
    """Topology 6 is one server: no flow carries congestion control, so the CC fields are not inputs."""
    base = input_hash(_on("roce_dcqcn", "fluid", topology="6"))
    for name, value in (("cc_mode", 3), ("enable_qcn", False), ("pmax", 0.5), ("rate_ai_bps", 2e8),
                        ("fluid_marks", "random"), ("int_header_bytes", 50)):
        assert input_hash(_on("roce_dcqcn", "fluid", topology="6", **{name: value})) == base, name
