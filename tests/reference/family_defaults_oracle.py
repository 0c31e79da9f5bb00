#!/usr/bin/env python3
"""What transformers makes of a minimal config.json of each family: the oracle of Odyssey's
family table (core/config/model_family.cpp; tests/core/tst_model_config.cpp, familyTable).

Usage: family_defaults_oracle.py CONFIG_JSON...   (each a config.json path)
Prints one JSON object: config path -> the defaults the config class fills in and the layout the
modeling file builds from it (bias on q/k/v and o_proj, q/k norms, tied embeddings, the layers
that slide, experts), read from an instantiated model, not from the config class's source.
"""
import json
import sys
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

transformers.logging.set_verbosity_error()


def describe(path):
    c = AutoConfig.from_pretrained(path)
    # A class default pad id past the test's small vocabulary (SmolLM3's 128004) would stop the
    # embedding from being built; the pad id is no default this oracle reports.
    if getattr(c, "pad_token_id", None) is not None and c.pad_token_id >= c.vocab_size:
        c.pad_token_id = None
    # MinistralConfig's head_dim defaults to None and transformers 5.17's MinistralAttention then
    # fails on None ** -0.5: a config.json without head_dim cannot be built there at all. Odyssey
    # reads such a file as Mistral's class does (hidden / heads), which the oracle spells out.
    if getattr(c, "head_dim", 0) is None:
        c.head_dim = c.hidden_size // c.num_attention_heads
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(c)
    layer = m.model.layers[0]
    attn = layer.self_attn
    q = getattr(attn, "q_proj", None) or getattr(attn, "qkv_proj")
    rp = getattr(c, "rope_parameters", None) or {}
    full = rp.get("full_attention", rp)  # Gemma-3: per layer type
    # The window each layer's attention applies: Gemma's modules hold theirs (None on full
    # layers); Mistral's, Phi-3's and Mixtral's pass config.sliding_window on every forward.
    windows = [(l.self_attn.sliding_window if hasattr(l.self_attn, "sliding_window")
                else getattr(c, "sliding_window", None)) or 0 for l in m.model.layers]
    mlp = layer.mlp
    experts = getattr(mlp, "experts", None)
    out = {
        "head_dim": attn.head_dim,
        "rms_norm_eps": c.rms_norm_eps,
        "tie_word_embeddings": m.lm_head.weight is m.model.embed_tokens.weight,
        "rope_theta": full.get("rope_theta"),
        # The share of each head RoPE rotates (Phi-3's attribute, GLM-4's rope_parameters entry).
        "partial_rotary_factor": full.get("partial_rotary_factor") or getattr(c, "partial_rotary_factor", None) or 1.0,
        "qkv_bias": q.bias is not None,
        "o_bias": attn.o_proj.bias is not None,
        "qk_norm": hasattr(attn, "q_norm"),
        # One head's width (Qwen3, Gemma-3) or all heads' (OLMo-2/3).
        "q_norm_width": int(attn.q_norm.weight.shape[0]) if hasattr(attn, "q_norm") else 0,
        # The block's RMSNorms by name: where they sit around the two branches.
        "block_norms": sorted(n for n, _ in layer.named_children() if n.endswith("norm")),
        "activation": getattr(c, "hidden_activation", None) or c.hidden_act,
        "sliding_window": max(windows),
        "sliding_layers": [w > 0 for w in windows],
        "attn_logit_softcapping": getattr(c, "attn_logit_softcapping", None) or 0.0,
        "final_logit_softcapping": getattr(c, "final_logit_softcapping", None) or 0.0,
        "num_experts": 0,
        # SmolLM3's NoPE layers: use_rope 0; other families rotate every layer.
        "rope_layers": [bool(getattr(l.self_attn, "use_rope", True)) for l in m.model.layers],
    }
    if experts is not None:
        gate_up = getattr(experts, "gate_up_proj", None)
        out["num_experts"] = int(gate_up.shape[0]) if gate_up is not None else len(experts)
        out["num_experts_per_tok"] = c.num_experts_per_tok
        out["moe_intermediate_size"] = int(gate_up.shape[1] // 2) if gate_up is not None else None
        shared = getattr(mlp, "shared_expert", None)
        out["shared_expert_intermediate_size"] = shared.gate_proj.out_features if shared is not None else 0
    return out


print(json.dumps({p: describe(p) for p in sys.argv[1:]}))
