"""Property tests over topology YAML: any file gives a topology or a one-line error with exit 2.

Files are the good two-server file of test_topology_yaml with values replaced by junk (wrong types,
NaN, infinities, huge and tiny numbers, unknown names, nested values), keys added, or raw bytes
(not UTF-8, not YAML). Each goes through ``moesim topology show``, which reads, builds and routes.
"""

from __future__ import annotations

import copy
import math
import tempfile
from pathlib import Path
from typing import Any

import yaml
from cli_fuzz import assert_result_or_one_line_error, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.topology import get_topology, load_cluster_yaml

GOOD: dict[str, Any] = {
    "name": "pair",
    "servers": 2,
    "server": {
        "cpus": ["cpu0"],
        "pcie_switches": ["psw0"],
        "gpus": ["gpu0", "gpu1"],
        "nics": ["nic0"],
        "links": [
            {"a": "psw0", "b": "cpu0", "bandwidth": "512Gbps", "delay": "0.2us"},
            {"a": "gpu0", "b": "psw0", "bandwidth": "512Gbps", "delay": "0.2us"},
            {"a": "gpu1", "b": "psw0", "bandwidth": "512 Gbps", "delay": "200ns"},
            {"a": "nic0", "b": "psw0", "bandwidth": 512e9, "delay": 0.2e-6},
        ],
    },
    "fabric": {"kind": "leaf_spine", "servers_per_leaf": 1, "spines": 2, "nic_bandwidth": "400Gbps"},
}

# Every place a value sits in GOOD, as a key path.
PATHS = [
    ("name",), ("servers",), ("server",), ("server", "cpus"), ("server", "cpus", 0), ("server", "pcie_switches"),
    ("server", "gpus"), ("server", "gpus", 0), ("server", "gpus", 1), ("server", "nics"), ("server", "nics", 0),
    ("server", "links"), *[("server", "links", i, k) for i in range(4) for k in ("a", "b", "bandwidth", "delay")],
    ("server", "links", 2), ("fabric",), ("fabric", "kind"), ("fabric", "servers_per_leaf"), ("fabric", "spines"),
    ("fabric", "nic_bandwidth"),
]
# Counts stay small or far beyond the size limits: a mid-size cluster would only make the test slow.
NUMBERS = st.one_of(st.integers(-3, 40), st.sampled_from([2**31, 10**9, 10**30, 10**400]),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0.0, -0.0, 1e-300, 5e-324, 1e300, 1e15, 1e6, 999999.0]))
WORDS = st.sampled_from(["", " ", "400Gbps", "1e-300Gbps", "1e400Gbps", "1e99999999Gbps", ".inf", "nan", "-1us",
                         "2s", "0.2us", "512 GB", "gpu0", "gpu1", "nic0", "psw0", "cpu0", "sw0", "leaf_spine",
                         "single_switch", "none", "mesh", "a\nb", "gpu0\n", "é", "\x00", "nvlink", "fabric"])
JUNK = st.recursive(st.one_of(st.none(), st.booleans(), NUMBERS, WORDS, st.text(max_size=12)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.one_of(WORDS, st.text(max_size=6)), inner, max_size=3)),
                    max_leaves=6)
EDITS = st.lists(st.tuples(st.sampled_from(PATHS), st.one_of(JUNK, st.just("<delete>"))), min_size=1, max_size=3)
FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def edited(edits: list[tuple[tuple[Any, ...], Any]]) -> Any:
    doc: Any = copy.deepcopy(GOOD)
    for path, value in edits:
        node = doc
        for key in path[:-1]:
            try:
                node = node[key]
            except (KeyError, IndexError, TypeError):
                break
        else:
            last = path[-1]
            if isinstance(node, dict) or (isinstance(node, list) and isinstance(last, int) and last < len(node)):
                if value == "<delete>":
                    node.pop(last) if isinstance(node, list) else node.pop(last, None)
                else:
                    node[last] = value
    return doc


def check_file(text: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "topo.yaml"
        path.write_bytes(text)
        try:  # the library: a topology or a MoesimError, nothing else
            load_cluster_yaml(path)
            topo = get_topology(str(path))
            assert topo.num_gpus >= 1 and topo.routes(0, topo.num_gpus - 1)
        except MoesimError as exc:
            assert "\n" not in str(exc)
        code, _, err = run_cli("topology", "show", str(path))  # the command: exit 0, or one line and exit 2
        assert_result_or_one_line_error(code, err)


@FUZZ
@given(EDITS)
def test_edited_topology_files_give_a_topology_or_one_line(edits: list[tuple[tuple[Any, ...], Any]]) -> None:
    check_file(yaml.safe_dump(edited(edits), sort_keys=False, allow_unicode=True).encode())


@FUZZ
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode),
                 st.binary(max_size=40).map(lambda b: yaml.safe_dump(GOOD).encode() + b)))
def test_raw_bytes_give_a_topology_or_one_line(data: bytes) -> None:
    check_file(data)


def test_the_unedited_file_builds() -> None:  # the fuzzed files start from a good one
    check_file(yaml.safe_dump(GOOD, sort_keys=False).encode())
    assert math.isfinite(get_topology("1").links[0].bandwidth_bps)
