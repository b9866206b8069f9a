"""Hugging Face config.json readers, one module per model family, registered by ``model_type``.

Adding a family: write ``<family>.py`` with a ``(ConfigReader, HfContext) -> ModelSpec`` function,
register it in ``HF_FAMILIES`` under each ``model_type`` it reads, and import the module here.
"""

from moesim.models.hf_families import deepseek, glm_moe, mixtral, qwen_moe
from moesim.models.hf_families.base import HF_FAMILIES, ConfigReader, HfContext

__all__ = ["HF_FAMILIES", "ConfigReader", "HfContext", "deepseek", "glm_moe", "mixtral", "qwen_moe"]
