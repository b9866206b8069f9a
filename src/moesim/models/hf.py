"""Build a ModelSpec from a Hugging Face ``config.json``; the family is chosen by its ``model_type``.

Families (one module each in ``moesim.models.hf_families``): DeepSeek-V2/V3 and Kimi K2 (MLA +
DeepSeekMoE), Mixtral, Qwen2-MoE/Qwen3-MoE, GLM-4.5 (glm4_moe) and GLM-5 (glm_moe_dsa). A config gives
architecture only: ``total_params`` and ``checkpoint_size_bytes`` stay unset (see
``moesim.models.residency`` for sizing a checkpoint from its files).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from moesim.errors import MoesimError, input_error
from moesim.fileio import refuse_special_file
from moesim.models.hf_families import HF_FAMILIES, ConfigReader, HfContext
from moesim.models.schema import check_spec
from moesim.models.spec import ModelSpec


def default_key(path: Path) -> tuple[str, str]:
    """(key, name) for a config file: its directory's name for ``config.json``, else the file stem."""
    name = path.resolve().parent.name if path.name == "config.json" else path.stem
    name = name or "model"
    return name.lower().replace(" ", "-"), name


class _Duplicate(ValueError):
    """A JSON object holds one key twice (``json`` would keep the last silently)."""


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [k for k, _ in pairs]
    for k in keys:
        if keys.count(k) > 1:
            raise _Duplicate(k)
    return dict(pairs)


def from_hf_config(path: str | os.PathLike[str], key: str | None = None) -> ModelSpec:
    """Read ``path`` (a Hugging Face config.json) into a checked ModelSpec.

    ``key`` defaults to the lower-cased name of the directory holding ``config.json``. Missing or
    contradictory fields and unknown model types are one-line MoesimErrors naming the file and field.
    """
    p = Path(path)
    source = str(p)
    refuse_special_file(p, "config.json")
    try:
        data = json.loads(p.read_text(encoding="utf-8"), object_pairs_hook=_no_duplicates)
    except _Duplicate as exc:
        raise input_error(source, str(exc), "given twice; give it once (which value was meant is not for moesim "
                          "to guess)") from None
    except FileNotFoundError:
        raise MoesimError(f"{source}: config file not found") from None
    except json.JSONDecodeError as exc:
        raise MoesimError(
            f"{source}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MoesimError(f"{source}: cannot read config: {exc}") from None
    if not isinstance(data, dict):
        raise input_error(source, "<top level>", f"must be a JSON object, got {type(data).__name__}")
    model_type = data.get("model_type")
    if not isinstance(model_type, str):
        raise input_error(source, "model_type", "missing or not a string", allowed=HF_FAMILIES.names())
    if model_type not in HF_FAMILIES:
        raise input_error(source, "model_type", f"unsupported '{model_type}'", allowed=HF_FAMILIES.names())
    auto_key, name = default_key(p)
    ctx = HfContext(source=source, key=key or auto_key, name=name)
    spec = HF_FAMILIES.get(model_type)(ConfigReader(data, source), ctx)
    return check_spec(spec, source)
