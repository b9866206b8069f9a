"""Everyday use of `moesim run`: option values complete in the shell, a mistyped --set key gets a suggestion,
and the summary names its overrides and splits communication into exposed and hidden."""

from __future__ import annotations

import os
import subprocess
import sys

from moesim.network import BACKENDS


def _complete(*words: str) -> list[str]:
    env = {**os.environ, "_MOESIM_COMPLETE": "complete_bash", "COMP_WORDS": " ".join(("moesim", *words)),
           "COMP_CWORD": str(len(words))}
    out = subprocess.run([sys.executable, "-m", "moesim"], env=env, capture_output=True, text=True, timeout=120)
    return out.stdout.split()


def test_option_values_complete_from_the_registries():
    assert sorted(_complete("run", "--backend", "")) == sorted(BACKENDS.names())
    assert _complete("run", "--backend", "pa") == ["packet"]
    assert "roce_dcqcn" in _complete("run", "--network", "roce")
    assert "deepseek-v4-flash" in _complete("run", "--model", "deepseek")
    assert {"1", "6", "hgx-h100:"} <= set(_complete("run", "--topology", ""))
    assert _complete("run", "--set", "token") == ["tokens="]


def test_a_mistyped_set_key_names_the_close_ones():
    out = subprocess.run([sys.executable, "-m", "moesim", "run", "--model", "qwen3-30b-a3b", "--topology", "hgx-h100:1",
                          "--strategy", "TP1EP8", "--set", "token=64"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "did you mean tokens?" in out.stderr and len(out.stderr.splitlines()) == 1


def test_the_summary_names_overrides_and_hidden_communication():
    out = subprocess.run([sys.executable, "-m", "moesim", "run", "--model", "qwen3-30b-a3b", "--topology", "hgx-h100:1",
                          "--strategy", "TP1EP8", "--backend", "flow", "--set", "tokens=64", "--progress", "none"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    head, times = out.stdout.splitlines()[:2]
    assert head.endswith("tokens=64")
    fields = times.replace("(", " ").replace(")", " ").replace(",", " ").split()
    value = {fields[i]: float(fields[i + 1]) for i in range(len(fields) - 1)
             if fields[i] in ("comm", "exposed", "hidden")}
    assert abs(value["exposed"] + value["hidden"] - value["comm"]) <= 2e-6
