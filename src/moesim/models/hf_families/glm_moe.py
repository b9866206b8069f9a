"""GLM-4.5/4.6 (glm4_moe) configs, GQA with an explicit head_dim, and GLM-5 (glm_moe_dsa), MLA attention.

Fields: n_routed_experts, n_shared_experts, num_experts_per_tok, moe_intermediate_size (routed and shared
experts), first_k_dense_replace (leading dense layers of width intermediate_size), head_dim (GLM-4.5:
96 heads × 128 ≠ hidden_size 5120, so it must be read, not derived). GLM-5's sparse-attention indexer
(DSA) is not modelled. Reference: GLM-4.5 report (arXiv:2508.06471); transformers' Glm4MoeConfig.
"""

from __future__ import annotations

from moesim.models.hf_families.base import HF_FAMILIES, ConfigReader, HfContext, mla_attention
from moesim.models.spec import AttentionSpec, ModelSpec


def _read_glm(cfg: ConfigReader, ctx: HfContext, mla: bool) -> ModelSpec:
    hidden = cfg.req("hidden_size")
    layers = cfg.req("num_hidden_layers")
    heads = cfg.req("num_attention_heads")
    experts = cfg.req("n_routed_experts")
    dense = cfg.leading_dense("first_k_dense_replace", layers)
    width = cfg.req("moe_intermediate_size")
    if mla:
        attention = mla_attention(cfg, heads)
    else:
        attention = AttentionSpec(
            num_heads=heads, num_kv_heads=cfg.kv_heads(heads), head_dim=cfg.head_dim(hidden, heads)
        )
    return ModelSpec(
        key=ctx.key,
        name=ctx.name,
        hidden_size=hidden,
        comm_dim=hidden,
        num_layers=layers,
        first_dense_layers=dense,
        attention=attention,
        dense_ffn_width=cfg.req("intermediate_size") if dense else (cfg.opt("intermediate_size", 0) or 0),
        routed_experts=experts,
        shared_experts=cfg.opt("n_shared_experts", 0, minimum=0) or 0,
        top_k=cfg.top_k(experts, "n_routed_experts"),
        expert_ffn_width=width,
        vocab_size=cfg.req("vocab_size"),
        source=ctx.source,
        shared_expert_ffn_width=width,
        mtp_layers=cfg.opt("num_nextn_predict_layers", 0, minimum=0) or 0,
    )


@HF_FAMILIES.register(
    "glm4_moe", "GLM-4.5 / 4.6 (GQA, routed + shared experts)", "arXiv:2508.06471; transformers Glm4MoeConfig"
)
def read_glm4_moe(cfg: ConfigReader, ctx: HfContext) -> ModelSpec:
    return _read_glm(cfg, ctx, mla=False)


@HF_FAMILIES.register(
    "glm_moe_dsa", "GLM-5 (MLA + DSA, routed + shared experts)", "transformers GlmMoeDsaConfig"
)
def read_glm_moe_dsa(cfg: ConfigReader, ctx: HfContext) -> ModelSpec:
    return _read_glm(cfg, ctx, mla=True)
