"""Qwen2-MoE and Qwen3-MoE configs: GQA attention, routed experts, an optional (single) shared expert.

Fields: num_experts, num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size (Qwen2-MoE:
one gated shared expert of that width; absent or 0 in Qwen3-MoE), decoder_sparse_step and mlp_only_layers
(layer i is MoE iff i is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0), head_dim (else
hidden_size / heads). moesim models dense layers only as a leading block, so other patterns are rejected.
Reference: transformers' Qwen2MoeConfig / Qwen3MoeConfig and their decoder-layer construction.
"""

from __future__ import annotations

from moesim.models.hf_families.base import HF_FAMILIES, ConfigReader, HfContext
from moesim.models.spec import AttentionSpec, ModelSpec


def _leading_dense_layers(cfg: ConfigReader, layers: int) -> int:
    step = cfg.opt("decoder_sparse_step", 1) or 1
    mlp_only = set(cfg.int_list("mlp_only_layers"))
    dense = [i for i in range(layers) if i in mlp_only or (i + 1) % step != 0]
    if dense != list(range(len(dense))):
        field = "decoder_sparse_step" if step != 1 else "mlp_only_layers"
        raise cfg.error(
            field,
            f"dense layers {dense[:8]}{'…' if len(dense) > 8 else ''} are not a leading block; moesim models only leading dense layers",
        )
    if len(dense) >= layers:
        raise cfg.error("mlp_only_layers", f"leaves no MoE layer of num_hidden_layers={layers}")
    return len(dense)


def read_qwen_moe(cfg: ConfigReader, ctx: HfContext) -> ModelSpec:
    hidden = cfg.req("hidden_size")
    layers = cfg.req("num_hidden_layers")
    heads = cfg.req("num_attention_heads")
    experts = cfg.req("num_experts")
    dense = _leading_dense_layers(cfg, layers)
    shared_width = cfg.opt("shared_expert_intermediate_size", 0, minimum=0) or 0
    return ModelSpec(
        key=ctx.key,
        name=ctx.name,
        hidden_size=hidden,
        comm_dim=hidden,
        num_layers=layers,
        first_dense_layers=dense,
        attention=AttentionSpec(
            num_heads=heads, num_kv_heads=cfg.kv_heads(heads), head_dim=cfg.head_dim(hidden, heads)
        ),
        dense_ffn_width=cfg.req("intermediate_size") if dense else (cfg.opt("intermediate_size", 0) or 0),
        routed_experts=experts,
        shared_experts=1 if shared_width else 0,
        top_k=cfg.top_k(experts, "num_experts"),
        expert_ffn_width=cfg.req("moe_intermediate_size"),
        vocab_size=cfg.req("vocab_size"),
        source=ctx.source,
        shared_expert_ffn_width=shared_width or None,
    )


HF_FAMILIES.register(
    "qwen2_moe", "Qwen2-MoE / Qwen1.5-MoE (routed + one shared expert)", "transformers Qwen2MoeConfig"
)(read_qwen_moe)
HF_FAMILIES.register("qwen3_moe", "Qwen3-MoE (routed experts only)", "transformers Qwen3MoeConfig")(
    read_qwen_moe
)
