"""Matrix specs: the study matrix, products with include/exclude, presets, canonical levels, strict errors."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from moesim.errors import MoesimError
from moesim.experiments import load_matrix, parse_matrix, study_matrix
from moesim.experiments.factors import canonical_level, level_label

# docs/study.md §1: the levels of the study's factors.
STUDY_LEVELS = {
    "model": {"kimi-k3", "glm-5.3", "deepseek-v4-pro", "deepseek-v4-flash"},
    "topology": {"1", "2", "3", "4", "5", "6"},
    "strategy": {"TP2EP16", "TP4EP8", "TP8EP4", "TP16EP2"},
    "algorithm": {"ring_direct", "dbt_direct"},
    "network": {"ib_cc0", "ib_hpcc", "roce_hpcc", "roce_dcqcn"},
}


def _configs(specs: list) -> set[tuple]:
    return {(s.model, s.topology, s.strategy, s.algorithm, s.network, s.backend, s.overrides) for s in specs}


def test_study_matrix_is_the_full_product_of_study_md() -> None:
    specs = study_matrix().runs()
    assert len(specs) == 4 * 6 * 4 * 2 * 4 == 768
    expected = set(itertools.product(*(sorted(v) for v in STUDY_LEVELS.values())))
    assert {(s.model, s.topology, s.strategy, s.algorithm, s.network) for s in specs} == expected
    assert {s.backend for s in specs} == {"fluid"} and all(s.overrides == () for s in specs)


@pytest.mark.parametrize(("preset", "runs", "check"), [
    ("flash", 192, lambda s: s.model == "deepseek-v4-flash"),
    ("feedback", 576, lambda s: s.network != "ib_cc0"),
    ("roce", 384, lambda s: s.network.startswith("roce")),
    ("network", 640, lambda s: s.topology != "6"),
    ("smoke", 4, lambda s: s.model == "deepseek-v4-flash" and s.topology in ("1", "6")),
])
def test_study_presets(preset: str, runs: int, check) -> None:
    specs = study_matrix().with_preset(preset).runs()
    assert len(specs) == runs == study_matrix().with_preset(preset).count_runs()
    assert all(check(s) for s in specs)


def test_unknown_preset_lists_the_presets() -> None:
    with pytest.raises(MoesimError, match=r"unknown preset 'nope'.*allowed: flash, feedback, roce, network, smoke"):
        study_matrix().with_preset("nope")


def test_with_levels_replaces_a_factor() -> None:
    m = study_matrix().with_levels("model", ["deepseek-v4-flash"]).with_levels("topology", ["1", "6"])
    specs = m.runs()
    assert len(specs) == 1 * 2 * 4 * 2 * 4
    assert {s.topology for s in specs} == {"1", "6"}


def test_product_include_exclude() -> None:
    data = {
        "factors": {"model": "deepseek-v4-flash", "topology": [1, 6], "strategy": ["TP2EP16", "TP4EP8"],
                    "network": ["ib_cc0", "roce_dcqcn"]},
        # adds topology 4 × both strategies × both networks (4 runs), and one TP8EP4 run on topology 1
        "include": [{"topology": 4}, {"topology": 1, "strategy": "TP8EP4", "network": "ib_cc0"}],
        # removes topology 6 under roce_dcqcn (2 runs) and every TP4EP8 run on topology 4 (2 runs)
        "exclude": [{"topology": 6, "network": "roce_dcqcn"}, {"topology": 4, "strategy": "tp4ep8"}],
    }
    specs = parse_matrix(data, "m.yaml").runs()
    base = set(itertools.product(["1", "6"], ["TP2EP16", "TP4EP8"], ["ib_cc0", "roce_dcqcn"]))
    base |= set(itertools.product(["4"], ["TP2EP16", "TP4EP8"], ["ib_cc0", "roce_dcqcn"]))
    base |= {("1", "TP8EP4", "ib_cc0")}
    base = {c for c in base if not (c[0] == "6" and c[2] == "roce_dcqcn") and not (c[0] == "4" and c[1] == "TP4EP8")}
    assert {(s.topology, s.strategy, s.network) for s in specs} == base
    assert len(specs) == len(base) == 8 + 4 + 1 - 2 - 2
    assert parse_matrix(data, "m.yaml").count_runs() == len(base)


def test_override_factors_become_sorted_overrides() -> None:
    data = {"factors": {"model": "deepseek-v4-flash", "topology": 1, "strategy": "TP2EP16",
                        "tokens": [2048, 4096], "buffer_bytes": "16777216"},
            "exclude": [{"tokens": 2048}]}
    specs = parse_matrix(data, "m.yaml").runs()
    assert [s.overrides for s in specs] == [(("buffer_bytes", 16777216), ("tokens", 4096))]


def test_levels_are_canonical() -> None:
    assert canonical_level("strategy", "tp4ep8", "x") == "TP4EP8"
    assert canonical_level("topology", 3, "x") == "3"
    assert canonical_level("tokens", 4096.0, "x") == 4096 and isinstance(canonical_level("tokens", 4096.0, "x"), int)
    assert canonical_level("peak_flops", "1e15", "x") == 1e15  # YAML 1.1 reads 1e15 as a string
    assert canonical_level("peak_flops", 10**15, "x") == 1e15 and isinstance(canonical_level("peak_flops", 10**15, "x"), float)
    assert canonical_level("has_win", "false", "x") is False
    assert [level_label(v) for v in (4e11, 0.95, 4096, True, 1 / 3)] == ["4e+11", "0.95", "4096", "true", repr(1 / 3)]


def test_equal_specs_written_differently_are_one_run() -> None:
    data = {"factors": {"model": "deepseek-v4-flash", "topology": [1, "1"], "strategy": ["TP2EP16", "tp2ep16"]}}
    assert len(parse_matrix(data, "m.yaml").runs()) == 1


def test_relative_model_path_is_relative_to_the_matrix_file(small_dir: Path) -> None:
    specs = load_matrix(small_dir / "small.yaml").runs()
    assert {s.model for s in specs} == {str((small_dir / "tiny.yaml").resolve())}


@pytest.mark.parametrize(("text", "pattern"), [
    ("factors: {model: deepseek-v4-flash, topology: 1, strategy: TP2EP16, colour: red}",
     r"m\.yaml: field 'colour': unknown factor \(allowed: model, topology, strategy, algorithm, network, backend, .*tokens"),
    ("factors: {model: gpt-9, topology: 1, strategy: TP2EP16}",
     r"m\.yaml: field 'model': unknown level 'gpt-9' \(allowed: kimi-k3, glm-5.3, deepseek-v4-pro, deepseek-v4-flash"),
    ("factors: {model: deepseek-v4-flash, topology: 7, strategy: TP2EP16}",
     r"field 'topology': unknown level '7' \(allowed: 1, 2, 3, 4, 5, 6, gb200-nvl72\[:N\[:FABRIC\]\], "
     r"hgx-b200\[:N\[:FABRIC\]\], hgx-h100\[:N\[:FABRIC\]\], hgx-h20\[:N\[:FABRIC\]\], "
     r"hgx-h200\[:N\[:FABRIC\]\], hgx-h800\[:N\[:FABRIC\]\], mi300x\[:N\[:FABRIC\]\], star:N, a path to a topology \.yaml\)"),
    ("factors: {model: deepseek-v4-flash, topology: 'hgx-h100:0', strategy: TP8EP2}",
     r"field 'topology': topology 'hgx-h100:0': the server count '0' is not a positive integer"),
    ("factors: {model: deepseek-v4-flash, topology: 1, strategy: TP2xEP16}",
     r"field 'strategy': unknown level 'TP2xEP16' \(allowed: TP<n>EP<m>"),
    ("factors: {model: deepseek-v4-flash, topology: 1, strategy: TP2EP16, network: roce}",
     r"field 'network': unknown level 'roce' \(allowed: ib_cc0, ib_hpcc, roce_hpcc, roce_dcqcn"),
    ("factors: {model: deepseek-v4-flash, topology: 1, strategy: TP2EP16, algorithm: ring}",
     r"field 'algorithm': unknown level 'ring' \(allowed: ring_direct, dbt_direct\)"),
    ("factors: {model: deepseek-v4-flash, topology: 1, strategy: TP2EP16, backend: ns3}",
     r"field 'backend': unknown level 'ns3' \(allowed: .*flow"),
    ("factors: {model: deepseek-v4-flash, topology: 1, strategy: TP2EP16, tokens: many}",
     r"field 'tokens': expected an integer, got 'many'"),
    ("factors: {model: deepseek-v4-flash, topology: 1}", r"field 'factors': missing factor\(s\) strategy"),
    ("factors: {model: deepseek-v4-flash, topology: 1, strategy: []}", r"field 'factors.strategy': needs at least one level"),
    ("factor: {model: deepseek-v4-flash}", r"field 'factor': unknown key in a matrix file \(allowed: name, description, factors"),
    ("factors: {model: a, model: b}", r"m\.yaml: not valid YAML at line 1.*duplicate key 'model'"),
    ("factors: [model", r"m\.yaml: not valid YAML at line"),
    ("factors: {model: deepseek-v4-flash, topology: 1, strategy: TP2EP16}\nexclude: {topology: 1}",
     r"field 'exclude': must be a list"),
    ("factors: {model: deepseek-v4-flash, topology: 1, strategy: TP2EP16}\nexclude: [{topology: 1}]",
     r"has no runs \(every combination is excluded\)"),
    ("factors: {model: missing.yaml, topology: 1, strategy: TP2EP16}", r"field 'model': model file 'missing.yaml' not found"),
])
def test_bad_matrix_files_give_one_line_errors(tmp_path: Path, text: str, pattern: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(MoesimError, match=pattern) as info:
        load_matrix(path).runs()
    assert "\n" not in str(info.value)


def test_missing_matrix_file(tmp_path: Path) -> None:
    with pytest.raises(MoesimError, match=r"nope\.yaml: matrix file not found"):
        load_matrix(tmp_path / "nope.yaml")


def test_a_level_equal_to_the_default_is_one_run_with_the_unnamed_factor() -> None:
    # the base runs have the default backend (fluid); the include entry names it: the same runs
    data = {"factors": {"model": "deepseek-v4-flash", "topology": [1, 6], "strategy": "TP2EP16"},
            "include": [{"backend": ["fluid", "flow"]}]}
    m = parse_matrix(data, "m.yaml")
    assert m.count_runs() == len(m.runs()) == 4


def test_a_billion_runs_are_counted_from_the_levels() -> None:
    data = {"factors": {"model": "deepseek-v4-flash", "topology": [1, 6], "strategy": "TP2EP16",
                        "tokens": list(range(1, 1001)), "jitter_seed": list(range(1, 1001)),
                        "start_jitter_s": [i * 1e-9 for i in range(500)]},
            "exclude": [{"topology": 6, "tokens": list(range(1, 501))}]}
    assert parse_matrix(data, "m.yaml").count_runs() == 2 * 1000 * 1000 * 500 - 500 * 1000 * 500


def test_all_excluded_is_refused_by_the_count_too() -> None:
    data = {"factors": {"model": "deepseek-v4-flash", "topology": 1, "strategy": "TP2EP16"}, "exclude": [{"topology": 1}]}
    with pytest.raises(MoesimError, match="has no runs"):
        parse_matrix(data, "m.yaml").count_runs()


def test_placement_is_a_factor_with_paths_relative_to_the_matrix(tmp_path: Path) -> None:
    (tmp_path / "maps").mkdir()
    (tmp_path / "maps" / "rev.json").write_text(str(list(range(31, -1, -1))))
    path = tmp_path / "m.yaml"
    path.write_text("factors: {model: deepseek-v4-flash, topology: 4, strategy: TP4EP8,\n"
                    "          placement: [contiguous, ep-within-server, maps/rev.json]}\n")
    levels = [dict(s.overrides)["placement"] for s in load_matrix(path).runs()]
    assert levels == ["contiguous", "ep-within-server", str((tmp_path / "maps" / "rev.json").resolve())]
    path.write_text("factors: {model: deepseek-v4-flash, topology: 4, strategy: TP4EP8, placement: [nearest]}\n")
    with pytest.raises(MoesimError, match=r"m\.yaml: field 'placement': unknown level 'nearest' \(allowed: "
                                          r"contiguous, ep-within-server, round-robin-nic, a comma-separated GPU list"):
        load_matrix(path).runs()


def test_server_templates_are_topology_levels(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("factors: {model: deepseek-v4-flash, topology: ['hgx-h100:2', 'mi300x:2:ls3'], strategy: TP8EP2}")
    assert {s.topology for s in load_matrix(path).runs()} == {"hgx-h100:2", "mi300x:2:ls3"}
