"""DeepSeek-V2/V3 configs (and Kimi K2, which reuses the DeepSeek-V3 layout): MLA attention + DeepSeekMoE.

Fields: n_routed_experts, n_shared_experts, num_experts_per_tok, moe_intermediate_size,
first_k_dense_replace (leading dense layers, FFN width intermediate_size), moe_layer_freq (must be 1:
moesim models only a leading block of dense layers), q_lora_rank, kv_lora_rank, qk_rope_head_dim,
qk_nope_head_dim, v_head_dim. num_hidden_layers excludes the multi-token-prediction layers
(num_nextn_predict_layers, ``mtp_layers``), which a forward pass does not run. References: DeepSeek-V2 (arXiv:2405.04434)
and DeepSeek-V3 (arXiv:2412.19437) technical reports; transformers' DeepseekV2Config/DeepseekV3Config.
"""

from __future__ import annotations

from moesim.models.hf_families.base import HF_FAMILIES, ConfigReader, HfContext, mla_attention
from moesim.models.spec import ModelSpec


def read_deepseek(cfg: ConfigReader, ctx: HfContext) -> ModelSpec:
    hidden = cfg.req("hidden_size")
    layers = cfg.req("num_hidden_layers")
    heads = cfg.req("num_attention_heads")
    experts = cfg.req("n_routed_experts")
    freq = cfg.opt("moe_layer_freq", 1)
    if freq != 1:
        raise cfg.error(
            "moe_layer_freq",
            f"only 1 is supported (MoE in every layer after the dense ones), got {freq}",
            allowed=[1],
        )
    dense = cfg.leading_dense("first_k_dense_replace", layers)
    width = cfg.req("moe_intermediate_size")
    return ModelSpec(
        key=ctx.key,
        name=ctx.name,
        hidden_size=hidden,
        comm_dim=hidden,
        num_layers=layers,
        first_dense_layers=dense,
        attention=mla_attention(cfg, heads),
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


for _model_type, _what in (
    ("deepseek_v2", "DeepSeek-V2 (MLA + DeepSeekMoE)"),
    ("deepseek_v3", "DeepSeek-V3 / R1 (MLA + DeepSeekMoE)"),
    ("kimi_k2", "Kimi K2 (DeepSeek-V3 layout)"),
):
    HF_FAMILIES.register(
        _model_type, _what, "DeepSeek-V2/V3 technical reports; transformers DeepseekV3Config"
    )(read_deepseek)
