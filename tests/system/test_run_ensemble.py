"""Ensemble members (moesim.system.ensemble): the rule that defines each member, how a run is prepared from it,
and that member 0 and the defaults leave every existing run's key alone."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from moesim.errors import MoesimError
from moesim.experiments.inputs import input_hash
from moesim.system.ensemble import ENSEMBLE, PAYLOADS_BYTES, START_SKEW_S, member, members
from moesim.system.run import prepare
from moesim.system.spec import RunSpec

SPEC = RunSpec("deepseek-v4-flash", "1", "TP2EP16", network="roce_dcqcn", backend="packet",
               overrides=(("tokens", 256),))


def test_member_k_sets_the_skew_the_payload_in_turn_and_its_own_ecn_stream():
    for k in range(1, 8):
        m = member(k)
        assert (m.start_skew_s, m.jitter_seed, m.ecn_seed) == (START_SKEW_S, k, 1 + k)
        assert m.payload_bytes == PAYLOADS_BYTES[(k - 1) % 3]
    assert [member(k).payload_bytes for k in (1, 2, 3)] == [1024, 2048, 4096]
    assert member(0).overrides(True) == {}


def test_members_start_with_the_run_as_specified():
    specs = members(SPEC, 4)
    assert specs[0] == SPEC and len(specs) == 4
    assert [s.override_dict().get(ENSEMBLE) for s in specs] == [None, 1, 2, 3]
    assert len({input_hash(s) for s in specs}) == 4


def test_a_prepared_member_carries_its_perturbation():
    p = prepare(members(SPEC, 3)[2])
    assert (p.settings.start_jitter_s, p.settings.jitter_seed) == (START_SKEW_S, 2)
    assert p.params.transport.packet_payload_bytes == 2048 and p.params.packet.ecn_seed == 3
    fluid = prepare(dataclasses.replace(members(SPEC, 3)[2], backend="fluid"))
    assert fluid.params.packet.ecn_seed == 1  # no packets, no ECN stream to vary
    assert fluid.params.transport.packet_payload_bytes == 2048


def test_the_default_ecn_stream_keeps_existing_keys():
    assert input_hash(SPEC) == input_hash(dataclasses.replace(SPEC, overrides=(("ecn_seed", 1), ("tokens", 256))))
    assert input_hash(SPEC) != input_hash(dataclasses.replace(SPEC, overrides=(("ecn_seed", 2), ("tokens", 256))))


@pytest.mark.parametrize("overrides,needle", [
    ((("ensemble_member", 2), ("jitter_seed", 4)), "drop jitter_seed"),
    ((("ensemble_member", 64),), "ensemble_member"),
    ((("ensemble_member", -1),), "ensemble_member"),
])
def test_bad_members_are_one_line_errors(overrides, needle):
    with pytest.raises(MoesimError, match=needle) as e:
        prepare(dataclasses.replace(SPEC, overrides=overrides))
    assert "\n" not in str(e.value)


def test_an_ensemble_needs_two_to_64_members_and_no_perturbed_override():
    for k in (0, 1, 65):
        with pytest.raises(MoesimError, match="--ensemble"):
            members(SPEC, k)
    with pytest.raises(MoesimError, match="packet_payload_bytes"):
        members(dataclasses.replace(SPEC, overrides=(("packet_payload_bytes", 2048),)), 3)


def test_run_prints_each_member_and_the_spread():
    out = subprocess.run([sys.executable, "-m", "moesim", "run", "--model", "qwen3-30b-a3b", "--topology",
                          "hgx-h100:2", "--strategy", "TP2EP8", "--backend", "flow", "--set", "tokens=64",
                          "--ensemble", "3", "--json", "--progress", "none"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout)
    walls = [m["wall_s"] for m in rec["members"]]
    assert [m["member"] for m in rec["members"]] == [0, 1, 2]
    assert rec["members"][1]["perturbation"]["packet_payload_bytes"] == 1024
    assert (rec["wall_min_s"], rec["wall_max_s"]) == (min(walls), max(walls))
    assert sorted(i for c in rec["clusters"] for i in c) == [0, 1, 2]
    assert rec["bistable"] == (len(rec["clusters"]) > 1)
    refused = subprocess.run([sys.executable, "-m", "moesim", "run", "--model", "qwen3-30b-a3b", "--topology",
                              "hgx-h100:2", "--strategy", "TP2EP8", "--ensemble", "3", "--seeds", "2"],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "--ensemble" in refused.stderr
