"""NetworkParams: sections owned by their readers, flat names for everything outside."""

import dataclasses

import pytest

from moesim.errors import MoesimError
from moesim.network.cc import CC_ALGORITHMS
from moesim.network.params import NETWORK_MODES, OWNER, SECTION_TYPES, SECTIONS, NetworkParams, network_mode


def test_every_registered_algorithm_with_parameters_has_its_section():
    types = {e.obj.params_type for e in CC_ALGORITHMS if e.obj.params_type is not None}
    assert types and types <= set(SECTION_TYPES)
    for cls in types:
        assert isinstance(NetworkParams().cc_params(cls), cls)


def test_flat_names_are_unique_and_cover_every_section_field():
    fields = [f.name for cls in SECTION_TYPES for f in dataclasses.fields(cls)]
    assert len(fields) == len(set(fields)) == len(OWNER)
    assert set(NetworkParams().as_dict()) == {"name", "cc_mode", *fields}


@pytest.mark.parametrize("mode", sorted(NETWORK_MODES))
def test_as_dict_round_trips_through_with_overrides(mode):
    params = NETWORK_MODES[mode]
    assert NetworkParams().with_overrides(params.as_dict()) == params


def test_an_override_lands_in_its_own_section_only():
    base = NETWORK_MODES["roce_dcqcn"]
    changed = base.with_overrides({"rp_timer_s": 3e-4, "buffer_bytes": 1 << 20, "fluid_rtt": "data"})
    assert changed.value("rp_timer_s") == 3e-4 and changed.switch.buffer_bytes == 1 << 20
    assert changed.fluid.fluid_rtt == "data"
    assert changed.transport == base.transport and changed.rate == base.rate
    moved = {k for k in base.as_dict() if base.as_dict()[k] != changed.as_dict()[k]}
    assert moved == {"rp_timer_s", "buffer_bytes", "fluid_rtt"}


def test_an_algorithm_reads_its_overridden_section():
    hpcc = CC_ALGORITHMS.get("hpcc")
    base = NETWORK_MODES["roce_hpcc"]
    assert hpcc.pack_params(base.with_overrides({"u_target": 0.5}))[0] == 0.5
    assert hpcc.pack_params(base)[0] == 0.95


def test_unknown_names_and_bad_choices_are_one_line_errors():
    with pytest.raises(MoesimError, match="field 'bogus_s': unknown network parameter"):
        NetworkParams().with_overrides({"bogus_s": 1.0}, "run.yaml")
    with pytest.raises(MoesimError, match="'fluid_window'.*rate, bytes"):
        NetworkParams().with_overrides({"fluid_window": "packets"})


def test_fixed_sections_are_attributes():
    params = NetworkParams()
    for name, cls in SECTIONS.items():
        assert isinstance(getattr(params, name), cls)


def test_registering_a_cc_algorithm_after_import_is_a_one_line_error():
    """The kernels' dispatch and the network parameters are built from the algorithms registered at import;
    a later registration says where to register instead of failing inside a kernel."""
    none = CC_ALGORITHMS.get("none")
    late = dataclasses.replace(none, name="late", mode=42)
    with pytest.raises(MoesimError, match=r"'late': cannot be registered now .*moesim/network/cc/__init__.py"):
        CC_ALGORITHMS.register("late", "an algorithm registered after import", "")(late)
    assert "late" not in CC_ALGORITHMS


@pytest.mark.parametrize("name", ["kmin_kb", "kmax_kb"])
def test_an_empty_ecn_map_is_refused(name):
    with pytest.raises(MoesimError, match=f"field '{name}': needs at least one"):
        network_mode("roce_dcqcn").with_overrides({name: []})
