"""The built-in model catalog (one YAML per model in ``moesim/models/data``) and model lookup by key or path.

The four study models of docs/study.md §2 come first, in the study's order; the public MoE models
(DeepSeek-V3, Mixtral-8x7B, Qwen3-30B-A3B, GLM-4.5) follow, with the values of their public configs.
"""

from __future__ import annotations

import functools
import os
from importlib import resources
from pathlib import Path

from moesim.errors import MoesimError, input_error
from moesim.fileio import load_yaml_strict, refuse_special_file
from moesim.models.schema import spec_from_mapping
from moesim.models.spec import ModelSpec

STUDY_MODELS: tuple[str, ...] = ("kimi-k3", "glm-5.3", "deepseek-v4-pro", "deepseek-v4-flash")
"""Keys of the four study models, in the order of docs/study.md §2."""


def load_model_file(path: str | os.PathLike[str]) -> ModelSpec:
    """Read a user model YAML with the same schema as the built-ins (strict: see ``moesim.models.schema``)."""
    p = Path(path)
    refuse_special_file(p, "model file")
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MoesimError(f"{p}: model file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MoesimError(f"{p}: cannot read model file: {exc}") from None
    return spec_from_mapping(load_yaml_strict(text, str(p)), str(p))


@functools.cache
def _builtin() -> dict[str, ModelSpec]:
    specs: dict[str, ModelSpec] = {}
    data = resources.files("moesim.models") / "data"
    for entry in sorted(data.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        source = f"moesim/models/data/{entry.name}"
        spec = spec_from_mapping(load_yaml_strict(entry.read_text(encoding="utf-8"), source), source)
        stem = entry.name[: -len(".yaml")]
        if spec.key != stem:
            raise input_error(source, "key", f"must equal the file name '{stem}', got '{spec.key}'")
        specs[spec.key] = spec
    missing = [k for k in STUDY_MODELS if k not in specs]
    if missing:
        raise MoesimError(f"moesim/models/data: study model file(s) missing: {', '.join(missing)}")
    return specs


def list_models() -> list[ModelSpec]:
    """All built-in models: the study models in the study's order, then the others by key."""
    specs = _builtin()
    others = sorted(k for k in specs if k not in STUDY_MODELS)
    return [specs[k] for k in (*STUDY_MODELS, *others)]


def model_keys() -> list[str]:
    """Built-in keys, in :func:`list_models` order."""
    return [m.key for m in list_models()]


def _looks_like_path(ref: str) -> bool:
    return os.sep in ref or "/" in ref or ref.endswith((".yaml", ".yml", ".json")) or Path(ref).exists()


def get_model(key: str) -> ModelSpec:
    """A built-in model by key, or a model read from a path.

    A path may be a model YAML (``.yaml``/``.yml``), a Hugging Face ``config.json`` (any ``.json``), or a
    directory holding a ``config.json``. An unknown key is a MoesimError listing the allowed keys.
    """
    specs = _builtin()
    if key in specs:
        return specs[key]
    if _looks_like_path(key) and key.strip():
        p = Path(key)
        if not p.exists():
            raise MoesimError(
                f"{p}: model file not found (allowed: a catalog key, a model .yaml, a config.json)"
            )
        if p.is_dir():
            if not (p / "config.json").is_file():
                raise MoesimError(f"{p}: directory has no config.json (a Hugging Face model directory)")
            return ModelSpec.from_hf_config(p / "config.json")
        if p.suffix == ".json":
            return ModelSpec.from_hf_config(p)
        if p.suffix in (".yaml", ".yml"):
            return load_model_file(p)
        raise MoesimError(f"{p}: not a model file (allowed: .yaml, .yml, a Hugging Face config .json)")
    raise input_error(
        "model catalog",
        "model",
        f"unknown model '{key}'",
        allowed=[*model_keys(), "a path to a model .yaml or a Hugging Face config.json"],
    )
