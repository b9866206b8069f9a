"""Layering guards over the source tree (``src/moesim``), read as Python syntax trees.

What they check, precisely:

* CC modes: outside ``moesim/network/cc/`` no comparison (``==``, ``!=``, ``<``…, ``in``, ``not in``,
  ``is``) has an operand that mentions ``cc_mode`` or a ``.mode`` attribute, no dict literal is indexed
  or ``.get`` with such an expression, and no integer constant named ``CC_<X>`` or ``MODE_<X>`` is
  defined or compared. The CC_MODE numbers live in the algorithm modules; everything else asks the
  registry (``algorithm_for_mode``) and reads capability flags.
* CC algorithm names: outside ``moesim/network/cc/`` no comparison has a string operand (or a tuple,
  list or set literal holding one) equal to a registered algorithm's name other than ``none``, and no
  dict literal keyed by such a name is indexed or ``.get``.
* Algorithm modules: outside ``moesim/network/cc/`` (and in it only ``__init__.py``, the registry's
  list of modules) nothing imports an algorithm module.
* Backend names: no comparison or ``match`` case has a string operand equal to a registered backend's
  name, except in that backend's own module (for ``packet``: its package).
* Layer order: a module imports (at any level: module top, functions, ``TYPE_CHECKING`` blocks; also
  ``importlib.import_module("moesim....")`` with a constant name) nothing from a later layer. The order
  is the base modules (``moesim/__init__.py``, ``errors``, ``registry``, ``fileio``, ``schema``,
  ``units``), then ``models``, ``workload``, ``topology``, ``network``, ``system``, ``experiments``,
  ``serving``, ``analysis``, then the top (``cli``, ``commands``, ``api``, ``__main__``). A module may import its own
  layer and earlier ones.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import moesim
from moesim.network import BACKENDS
from moesim.network.cc import CC_ALGORITHMS

SRC = Path(moesim.__file__).resolve().parent
CC_DIR = SRC / "network" / "cc"
MODE_CONSTANT = re.compile(r"^(CC|MODE)_[A-Z0-9_]+$")
CC_NAMES = {e.name for e in CC_ALGORITHMS} - {"none"}
ALGORITHM_MODULES = {e.obj.pack_params.__module__.rsplit(".", 1)[1] for e in CC_ALGORITHMS}


def sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _mentions_mode(node: ast.AST) -> bool:
    return any((isinstance(n, ast.Name) and n.id == "cc_mode")
               or (isinstance(n, ast.Attribute) and n.attr in ("cc_mode", "mode"))
               for n in ast.walk(node))


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [s for elt in node.elts for s in _strings(elt)]
    return []


def _compared(tree: ast.AST) -> list[tuple[int, ast.expr]]:
    """(line, operand) of every comparison and ``match`` case value."""
    out: list[tuple[int, ast.expr]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            out += [(node.lineno, op) for op in (node.left, *node.comparators)]
        elif isinstance(node, ast.match_case):
            out += [(p.lineno, p.value) for p in ast.walk(node.pattern) if isinstance(p, ast.MatchValue)]
    return out


def cc_mode_violations(tree: ast.AST) -> list[str]:
    found = []
    for line, operand in _compared(tree):
        if _mentions_mode(operand):
            found.append(f"{line}: compares a CC mode")
        if any(isinstance(n, ast.Name) and MODE_CONSTANT.match(n.id) and n.id != "CC_ALGORITHMS"
               for n in ast.walk(operand)):
            found.append(f"{line}: compares a CC mode constant")
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict) and _mentions_mode(node.slice):
            found.append(f"{node.lineno}: looks a CC mode up in a dict literal")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and isinstance(node.func.value, ast.Dict) and any(_mentions_mode(a) for a in node.args)):
            found.append(f"{node.lineno}: looks a CC mode up in a dict literal")
        if isinstance(node, ast.Assign):
            names = [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            ints = [n for n in ast.walk(node.value) if isinstance(n, ast.Constant) and type(n.value) is int]
            if ints and any(MODE_CONSTANT.match(name) for name in names):
                found.append(f"{node.lineno}: defines a CC mode constant")
    return found


def cc_name_violations(tree: ast.AST) -> list[str]:
    found = [f"{line}: compares CC algorithm name {s!r}" for line, operand in _compared(tree)
             for s in _strings(operand) if s in CC_NAMES]
    for node in ast.walk(tree):
        looked_up = node.value if isinstance(node, ast.Subscript) else (
            node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get" else None)
        if isinstance(looked_up, ast.Dict) and any(s in CC_NAMES for k in looked_up.keys if k for s in _strings(k)):
            found.append(f"{node.lineno}: looks a CC algorithm name up in a dict literal")
    return found


def algorithm_import_violations(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "moesim.network.cc":
            found += [f"{node.lineno}: imports {a.name}" for a in node.names if a.name in ALGORITHM_MODULES]
        elif isinstance(node, ast.ImportFrom | ast.Import):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            found += [f"{node.lineno}: imports {m}" for m in modules
                      if m.startswith("moesim.network.cc.") and m.rsplit(".", 1)[1] in ALGORITHM_MODULES]
    return found


def backend_home(name: str) -> Path:
    """The module (for a backend in a package: the package) that registers backend ``name``."""
    path = Path(inspect.getfile(BACKENDS.get(name))).resolve()
    return path.parent if path.parent != SRC / "network" else path


def backend_name_violations(tree: ast.AST, path: Path) -> list[str]:
    found = []
    for line, operand in _compared(tree):
        for s in _strings(operand):
            if s in BACKENDS:
                home = backend_home(s)
                if not (path == home or home in path.parents):
                    found.append(f"{line}: compares backend name {s!r}")
    return found


LAYERS = ("models", "workload", "topology", "network", "system", "experiments", "serving", "analysis")
BASE = frozenset({"__init__", "errors", "registry", "fileio", "schema", "units", "interrupts", "version"})
TOP = frozenset({"cli", "commands", "api", "__main__"})


def layer_rank(parts: tuple[str, ...]) -> int | None:
    """Rank of a module given its path inside ``moesim`` (``("network", "flow")``): 0 for the base, 1.. for
    the layers in order, above them the top; None if unknown. The package itself (``()``: ``import moesim``)
    and a name of it that is no module (``from moesim import __version__``) are its façade, which loads
    ``moesim.api`` on first use: the top."""
    if not parts or not ((SRC / parts[0]).is_dir() or (SRC / f"{parts[0]}.py").is_file()):
        return len(LAYERS) + 1
    head = parts[0]
    if head in LAYERS:
        return LAYERS.index(head) + 1
    if head in TOP:
        return len(LAYERS) + 1
    if head in BASE:
        return 0
    return None


def _imported(node: ast.AST, package: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The moesim modules (paths inside ``moesim``) an import node, or an ``import_module`` call with a
    constant name, reaches; ``package`` is the importing module's package (for relative imports)."""
    names: list[list[str]] = []
    if isinstance(node, ast.Import):
        names = [a.name.split(".") for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = ["moesim", *package][: len(package) + 2 - node.level]
            module = base + (node.module.split(".") if node.module else [])
        else:
            module = (node.module or "").split(".")
        # ``from moesim import network`` reaches moesim.network; ``from moesim import __version__`` the façade
        names = [[*module, a.name] for a in node.names] if module == ["moesim"] else [module]
    elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
          and isinstance(node.args[0].value, str)
          and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
               or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__")))):
        names = [node.args[0].value.split(".")]
    return [tuple(n[1:]) for n in names if n and n[0] == "moesim"]


def layer_violations(tree: ast.AST, module: tuple[str, ...]) -> list[str]:
    """Imports of ``module`` (its path inside ``moesim``, e.g. ``("network", "flow")``) that reach a later
    layer. The package's ``__init__`` is a façade (it loads ``moesim.api`` on first attribute access), so
    importing it, or a name of it that is no module (``from moesim import __version__``), reaches the top."""
    if module == ("__init__",):
        return []
    own = layer_rank(module)
    if own is None:
        return [f"1: module {'.'.join(module)} belongs to no layer (add it to LAYERS, BASE or TOP)"]
    package = module[:-1]
    found = []
    for node in ast.walk(tree):
        for target in _imported(node, package):
            rank = layer_rank(target)
            if rank is not None and rank > own:
                found.append(f"{node.lineno}: imports moesim.{'.'.join(target)} from a later layer")
    return found


def _module_path(path: Path) -> tuple[str, ...]:
    parts = path.relative_to(SRC).with_suffix("").parts
    return parts[:-1] + ("__init__",) if parts[-1] == "__init__" and len(parts) == 1 else parts


def _report(check) -> list[str]:
    bad = []
    for path in sources():
        tree = ast.parse(path.read_text(), str(path))
        bad += [f"{path.relative_to(SRC)}:{v}" for v in check(path, tree)]
    return bad


def test_no_cc_mode_is_compared_or_defined_outside_the_cc_package():
    assert _report(lambda p, t: [] if CC_DIR in p.parents else cc_mode_violations(t)) == []


def test_no_cc_algorithm_name_is_compared_outside_the_cc_package():
    assert _report(lambda p, t: [] if CC_DIR in p.parents else cc_name_violations(t)) == []


def test_only_the_registry_imports_the_algorithm_modules():
    def check(path: Path, tree: ast.AST) -> list[str]:
        return [] if path.parent == CC_DIR and path.name != "__init__.py" else algorithm_import_violations(tree)

    assert _report(lambda p, t: [] if p == CC_DIR / "__init__.py" else check(p, t)) == []


def test_no_backend_name_is_compared_outside_its_own_module():
    assert _report(lambda p, t: backend_name_violations(t, p)) == []


def test_no_module_imports_from_a_later_layer():
    assert _report(lambda p, t: layer_violations(t, _module_path(p))) == []


@pytest.mark.parametrize("code", [
    "if params.cc_mode == 3: pass",
    "x = 1 if self.cc.mode in (1, 3) else 0",
    "CC_HPCC = 3",
    "MODE_NONE, MODE_DCQCN = 0, 1",
    "if S.cfg[C_CC_MODE] == CC_HPCC: pass",
    "name = {0: 'none', 1: 'dcqcn'}.get(p.cc_mode, 'none')",
])
def test_the_cc_mode_check_catches(code):
    assert cc_mode_violations(ast.parse(code))


@pytest.mark.parametrize("code", [
    "ok = cc.name == 'hpcc'",
    "match cc.name:\n    case 'dcqcn': pass",
    "mode = {'dcqcn': 1, 'hpcc': 3}.get(self.cc.name, 0)",
])
def test_the_cc_name_check_catches(code):
    assert cc_name_violations(ast.parse(code))


@pytest.mark.parametrize("code", [
    "from moesim.network.cc import dcqcn",
    "from moesim.network.cc.hpcc import H_TIME",
    "import moesim.network.cc.dcqcn",
])
def test_the_import_check_catches(code):
    assert algorithm_import_violations(ast.parse(code))


@pytest.mark.parametrize("code", [
    "m = x if spec.backend in ('packet', 'fluid') else y",
    "if backend == 'flow': pass",
    "match spec.backend:\n    case 'analytical': pass",
])
def test_the_backend_name_check_catches(code):
    assert backend_name_violations(ast.parse(code), SRC / "system" / "run.py")
    assert not backend_name_violations(ast.parse("ok = backend_name is not None"), SRC / "system" / "run.py")


@pytest.mark.parametrize("module,code", [
    (("network", "flow"), "from moesim.system.engine import Simulation"),
    (("network", "packet", "backend"), "def f():\n    from moesim.experiments import run_sweep"),
    (("network", "packet", "backend"), "from ...system import engine"),
    (("models", "spec"), "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import moesim.workload.graph"),
    (("topology", "model"), "from moesim import network"),
    (("errors",), "from moesim.models import get_model"),
    (("analysis", "report"), "import importlib\nm = importlib.import_module('moesim.commands.run')"),
    (("experiments", "runner"), "from moesim.serving.replay import replay"),
    (("serving", "costs"), "from moesim.analysis.figures import render"),
    (("experiments", "inputs"), "from moesim import __version__"),
    (("experiments", "inputs"), "def f():\n    import moesim"),
])
def test_the_layer_check_catches(module, code):
    assert layer_violations(ast.parse(code), module)


@pytest.mark.parametrize("module,code", [
    (("system", "engine"), "from moesim.network.base import Flow\nfrom moesim.errors import MoesimError"),
    (("network", "packet", "backend"), "from .kernel import run\nfrom ..base import Flow"),
    (("experiments", "inputs"), "from moesim.version import __version__"),
    (("commands", "run"), "from moesim.analysis import load_results"),
    (("cli",), "from moesim import __version__"),
    (("serving", "costs"), "from moesim.experiments.executors import EXECUTORS"),
    (("analysis", "serving"), "from moesim.serving.store import record_serving"),
])
def test_the_layer_check_lets_earlier_layers_through(module, code):
    assert layer_violations(ast.parse(code), module) == []
