"""moesim.models layer: model specs, the built-in catalog, Hugging Face config loading, weight residency.

The first layer: it imports nothing from the rest of moesim except ``errors`` and ``registry``.
"""

from moesim.models.catalog import STUDY_MODELS, get_model, list_models, load_model_file
from moesim.models.residency import ResidencyReport, checkpoint_residency, model_residency, residency
from moesim.models.spec import AttentionSpec, ModelSpec

__all__ = [
    "STUDY_MODELS",
    "AttentionSpec",
    "ModelSpec",
    "ResidencyReport",
    "checkpoint_residency",
    "get_model",
    "list_models",
    "load_model_file",
    "model_residency",
    "residency",
]
