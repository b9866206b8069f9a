"""The repository stands on its own: documents and sources cite only files inside it, and each page in
``docs/`` stays short (at most 200 lines). Skipped outside a source checkout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("src", "docs", "tests", "benchmarks", "tools", "README.md")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".txt", ".proto", ".toml", ".json", ".cfg"}
MAX_PAGE_LINES = 200

# Documents that live outside the repository (the study's definition and the reference notes have their
# own copies: docs/study.md, docs/reference-semantics.md, docs/reference-runs.md, docs/architecture.md),
# paths that leave the checkout, and development-step labels. Spelt in pieces so this file passes too.
OUTSIDE = re.compile("|".join([
    r"\bSTUDY" r"\.md", r"REFERENCE" r"_SEMANTICS", r"NS3" r"_REFERENCE", r"ASTRA" r"_ANALYTICAL",
    r"\bDESIGN" r"\.md", r"\.\./" r"shared", r"\bstop" r" [0-9]",
]))


def outside_references(text: str) -> list[tuple[int, str]]:
    return [(n, m.group(0)) for n, line in enumerate(text.splitlines(), 1) for m in OUTSIDE.finditer(line)]


def checked_files() -> list[Path]:
    files: list[Path] = []
    for name in CHECKED:
        path = ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES
                      and "__pycache__" not in p.parts]
    return sorted(files)


@pytest.fixture(scope="module", autouse=True)
def _source_checkout():
    if not (ROOT / "docs").is_dir() or not (ROOT / "pyproject.toml").is_file():
        pytest.skip("not run from a source checkout")


def test_nothing_cites_a_file_outside_the_repository():
    found = [f"{p.relative_to(ROOT)}:{n}: {hit}" for p in checked_files()
             for n, hit in outside_references(p.read_text(errors="replace"))]
    assert found == [], "\n".join(found)


def test_every_docs_page_is_short():
    long = {p.name: n for p in sorted((ROOT / "docs").glob("*.md"))
            if (n := len(p.read_text().splitlines())) > MAX_PAGE_LINES}
    assert long == {}, f"pages over {MAX_PAGE_LINES} lines (move investigation detail to research/): {long}"


@pytest.mark.parametrize("text", [
    "cf. STUDY" ".md section 5", "(REFERENCE" "_SEMANTICS.md A.1)", "see NS3" "_REFERENCE_RUNS.md",
    "path = '../../" "shared/fixtures'", "measured in stop" " 26",
])
def test_the_outside_reference_check_catches(text):
    assert outside_references(text)
    assert not outside_references("docs/study.md §5; docs/reference-semantics.md A.1; a full stop.")


def test_the_license_is_an_spdx_expression_and_its_file_ships():
    """PEP 639: ``license`` is an SPDX expression (the table form is deprecated in setuptools) and every file
    of ``license-files`` exists, so the wheel carries it (``License-File`` in its metadata)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    files = [ROOT / name for name in project["license-files"]]
    assert files and all(f.is_file() for f in files)
    assert "Apache License" in files[0].read_text() and "Version 2.0, January 2004" in files[0].read_text()
