"""Output paths of `moesim topology draw|export|show`: a path that cannot be written is one line and
exit 2, naming the path; `show` lists a bounded number of GPU rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_fuzz import run_cli


@pytest.fixture()
def places(tmp_path: Path) -> Path:
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir.svg").mkdir()
    return tmp_path


@pytest.mark.parametrize(("case", "args", "message"), [
    ("export --out an existing file", ["export", "1", "--out", "{p}/afile"],
     "--out {p}/afile: is a file, not a folder"),
    ("export yaml --out an existing file", ["export", "1", "--format", "yaml", "--out", "{p}/afile"],
     "--out {p}/afile: is a file, not a folder"),
    ("draw --out an existing folder", ["draw", "1", "--out", "{p}/adir.svg"], "--out {p}/adir.svg: is a folder"),
    ("draw --out under a file", ["draw", "1", "--out", "{p}/afile/x.svg"],
     "--out {p}/afile/x.svg: {p}/afile is a file, not a folder"),
])
def test_unwritable_outputs_are_one_line(places: Path, case: str, args: list[str], message: str) -> None:
    code, _, err = run_cli("topology", *[a.format(p=places) for a in args])
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert message.format(p=places) in err, err


def test_draw_over_an_existing_file_replaces_it(places: Path) -> None:
    (places / "old.svg").write_text("old")
    code, out, err = run_cli("topology", "draw", "1", "--out", str(places / "old.svg"))
    assert code == 0, err
    assert (places / "old.svg").read_text().lstrip().startswith("<?xml")


def test_a_non_utf8_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\xff\xfe servers: 2")
    code, _, err = run_cli("topology", "show", str(bad))
    assert code == 2 and err == f"moesim: error: {bad}: not UTF-8 text (byte 0xff at offset 0); save the topology " \
                                "file as UTF-8\n"


def test_show_lists_the_first_gpus_and_the_last() -> None:
    code, out, _ = run_cli("topology", "show", "1", "--gpus", "4")
    assert code == 0 and "4 of 32 shown" not in out and "5 of 32 shown" in out
    assert "s3.gpu0" in out and "s4.gpu0" not in out and "s31.gpu0" in out
    code, out, _ = run_cli("topology", "show", "1", "--gpus", "0")
    assert code == 0 and "shown" not in out and all(f"s{s}.gpu0" in out for s in range(32))
