"""Tests and benchmarks use moesim's public surface only, read as Python syntax trees.

A file under ``tests/`` or ``benchmarks/`` may not reach a name starting with ``_`` (dunders excepted)
that another module defines:

* ``from moesim.x import _y`` or ``import moesim._x``;
* an attribute ``obj._y``, unless the file itself defines ``_y`` on ``self``/``cls`` or as a method or
  class attribute of a class it defines (a test's own fake may keep private state);
* ``setattr``/``getattr``/``delattr``/``hasattr`` (``monkeypatch.setattr`` and friends too) with a
  constant name starting with ``_``, and any string naming ``moesim.…._y`` in a call (``mock.patch``).

A test that needs a module's internals asks the module for a public surface instead (e.g.
``FluidBackend.flow_table``, ``jit.cache_locator``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("tests", "benchmarks")
PRIVATE = re.compile(r"^_(?!_)|^__\w*(?<!__)$")
DOTTED_PRIVATE = re.compile(r"^moesim(\.\w+)*\.(_(?!_)\w*|__\w*(?<!__))(\.|$)")
NAME_CALLS = {"setattr", "getattr", "delattr", "hasattr"}



def _is_private(name: str) -> bool:
    return bool(PRIVATE.match(name))


def _own_private_names(tree: ast.AST) -> set[str]:
    """Private names the file defines itself: on ``self``/``cls``, or in the body of its own classes."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    own.add(item.name)
                targets = (item.targets if isinstance(item, ast.Assign)
                           else [item.target] if isinstance(item, ast.AnnAssign) else [])
                own.update(t.id for t in targets if isinstance(t, ast.Name))
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else [])
        for t in targets:
            for n in ast.walk(t):
                if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                        and n.value.id in ("self", "cls")):
                    own.add(n.attr)
    return {n for n in own if _is_private(n)}


def private_accesses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every private name of another module the file reaches."""
    own = _own_private_names(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "moesim":
            found += [(node.lineno, p) for p in (node.module or "").split(".") if _is_private(p)]
            found += [(node.lineno, a.name) for a in node.names if _is_private(a.name)]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, p) for a in node.names if a.name.split(".")[0] == "moesim"
                      for p in a.name.split(".") if _is_private(p)]
        elif isinstance(node, ast.Attribute) and _is_private(node.attr) and node.attr not in own:
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Call):
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if fname in NAME_CALLS and len(node.args) >= 2:
                arg = node.args[1]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and _is_private(arg.value):
                    found.append((node.lineno, arg.value))
            for arg in (*node.args, *(k.value for k in node.keywords)):
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    m = DOTTED_PRIVATE.match(arg.value)
                    if m:
                        found.append((node.lineno, m.group(2)))
    return found


def checked_files() -> list[Path]:
    return sorted(p for d in CHECKED if (ROOT / d).is_dir() for p in (ROOT / d).rglob("*.py"))


def test_tests_and_benchmarks_reach_no_private_name_of_another_module():
    found = [f"{path.relative_to(ROOT).as_posix()}:{line}: {name}" for path in checked_files()
             for line, name in private_accesses(ast.parse(path.read_text(), str(path)))]
    assert found == [], "private names of other modules (use or add a public surface instead):\n" + "\n".join(found)


@pytest.mark.parametrize("code", [
    "from moesim.network.fluid import _FlowTable",
    "import moesim.network._impl",
    "sim._node_done = lambda *a: None",
    "x = backend._cols.cols",
    "monkeypatch.setattr(sim, '_node_done', hook)",
    "getattr(engine, '_next_flow')",
    "mock.patch('moesim.system.engine._FastForward')",
    "monkeypatch.setattr('moesim.network.jit._DIRS', ())",
])
def test_the_private_name_check_catches(code):
    assert private_accesses(ast.parse(code))


@pytest.mark.parametrize("code", [
    "from moesim import __version__",
    "class Fake:\n    def __init__(self):\n        self._n = 0\n    def bump(self):\n        self._n += 1",
    "class Fake:\n    def _helper(self):\n        return 1\n    def run(self):\n        return self._helper()",
    "def _local():\n    return 1\nx = _local()",
    "n = obj.__class__.__name__",
])
def test_the_private_name_check_lets_public_and_own_names_through(code):
    assert private_accesses(ast.parse(code)) == []
