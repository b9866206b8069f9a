"""Mixtral configs: every layer is MoE, no shared experts, GQA attention.

Fields: num_local_experts, num_experts_per_tok, intermediate_size (the width of each expert),
num_attention_heads, num_key_value_heads, head_dim (else hidden_size / heads).
Reference: Mixtral of Experts (arXiv:2401.04088); transformers' MixtralConfig.
"""

from __future__ import annotations

from moesim.models.hf_families.base import HF_FAMILIES, ConfigReader, HfContext
from moesim.models.spec import AttentionSpec, ModelSpec


@HF_FAMILIES.register(
    "mixtral", "Mixtral (sparse MoE in every layer, GQA)", "arXiv:2401.04088; transformers MixtralConfig"
)
def read_mixtral(cfg: ConfigReader, ctx: HfContext) -> ModelSpec:
    hidden = cfg.req("hidden_size")
    heads = cfg.req("num_attention_heads")
    experts = cfg.req("num_local_experts")
    return ModelSpec(
        key=ctx.key,
        name=ctx.name,
        hidden_size=hidden,
        comm_dim=hidden,
        num_layers=cfg.req("num_hidden_layers"),
        first_dense_layers=0,
        attention=AttentionSpec(
            num_heads=heads, num_kv_heads=cfg.kv_heads(heads), head_dim=cfg.head_dim(hidden, heads)
        ),
        dense_ffn_width=0,
        routed_experts=experts,
        shared_experts=0,
        top_k=cfg.top_k(experts, "num_local_experts"),
        expert_ffn_width=cfg.req("intermediate_size"),
        vocab_size=cfg.req("vocab_size"),
        source=ctx.source,
    )
