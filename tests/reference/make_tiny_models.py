#!/usr/bin/env python3
"""Oracle data for the decoder parity tests, produced by the real libraries at test time.

Builds tiny random Qwen2ForCausalLM (q/k/v bias, tied embeddings, sharded checkpoint),
Qwen3ForCausalLM (q_norm/k_norm, explicit head_dim != hidden/heads) and LlamaForCausalLM
(rope_type llama3, untied) with transformers' save_pretrained, runs a padded batch through
each in transformers and writes what Odyssey must reproduce:

  OUT/<name>/                      the model directory (config.json + safetensors)
  OUT/<name>.reference.safetensors input_ids, attention_mask, labels (the padded batch, as
                                   float32),
                                   logits, loss, grad.<HF parameter name> for every
                                   parameter, nopad.input_ids / nopad.logits (a batch
                                   without padding: SDPA's is_causal path)
  OUT/bad_*/                       broken copies for the error tests (--bad)
  OUT/score.jsonl, OUT/qwen2.score.json
                                   texts for `odyssey-train score` and HF's per-sample
                                   mean loss of each with the qwen2 model and a byte-level
                                   BPE tokenizer trained here (saved in OUT/qwen2/)

With --device cuda --dtype bfloat16 the reference is computed in that dtype on the GPU, and
an fp32 run on the same GPU (TF32 off) is stored beside it under the prefix "fp32.".

Pinned: transformers 5.17.0, torch 2.11, safetensors 0.8.0 (setup.sh installs them).
"""
import argparse
import json
import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file

import transformers
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3Config, Gemma3ForCausalLM,
                          Gemma3ForConditionalGeneration, Gemma3TextConfig, Glm4Config, Glm4ForCausalLM, GraniteConfig,
                          GraniteForCausalLM, LlamaConfig, LlamaForCausalLM, LlavaConfig,
                          LlavaForConditionalGeneration, Mistral3Config, Mistral3ForConditionalGeneration,
                          MinistralConfig, MinistralForCausalLM, MistralConfig, MistralForCausalLM,
                          MixtralConfig, MixtralForCausalLM, Olmo2Config, Olmo2ForCausalLM, Olmo3Config,
                          Olmo3ForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen2VLConfig, Qwen2VLForConditionalGeneration,
                          Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen3Config, Qwen3ForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM, Qwen3VLConfig, Qwen3VLForConditionalGeneration,
                          SmolLM3Config, SmolLM3ForCausalLM)

PINNED = "5.17.0"
VOCAB = 512
SEQ = 16
COMMON = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=256, rms_norm_eps=1e-6,
              initializer_range=0.2)


def rope_llama(name, seed, rope, **extra):
    """A Llama with one RoPE kind (transformers 4.x spelling: rope_scaling + rope_theta)."""
    return (name, seed, LlamaForCausalLM,
            LlamaConfig(**{**COMMON, **extra}, tie_word_embeddings=False, rope_scaling=rope, rope_theta=10000.0), None)


# Per model: the attention transformers computes (Gemma-2's soft-capping needs eager).
ATTN = {"gemma2": "eager"}
# The families of issue 22 (tests/core/tst_decoder_parity.cpp, "families"): odd sizes (head_dim
# != hidden / heads), GQA ratios 1, 2 and 4, sliding windows (5, 7) shorter than SEQ.
def family_models():
    return [
        ("mistral", 21, MistralForCausalLM,
         MistralConfig(**COMMON, head_dim=24, sliding_window=5, tie_word_embeddings=False, rope_theta=1000000.0), None),
        ("llama_hd", 22, LlamaForCausalLM,
         LlamaConfig(**{**COMMON, "num_key_value_heads": 4}, head_dim=24, attention_bias=True, mlp_bias=True,
                     tie_word_embeddings=False), None),
        ("smollm", 23, LlamaForCausalLM,
         LlamaConfig(**{**COMMON, "num_key_value_heads": 1}, tie_word_embeddings=True, rope_theta=100000.0), None),
        # Ministral: Mistral's block with the window (5) on the layers layer_types marks.
        ("ministral", 26, MinistralForCausalLM,
         MinistralConfig(**{**COMMON, "num_hidden_layers": 3}, head_dim=24, sliding_window=5,
                         layer_types=["sliding_attention", "full_attention", "sliding_attention"]), None),
        # SmolLM3: NoPE layers (the second unrotated) given as no_rope_layers, tied embeddings.
        ("smollm3", 25, SmolLM3ForCausalLM,
         SmolLM3Config(**{**COMMON, "num_hidden_layers": 3}, no_rope_layers=[1, 0, 1], pad_token_id=0, bos_token_id=1,
                       eos_token_id=2), None),
        # OLMo-2: no input norms, norms on the branches' outputs, q/k norm over all heads' width,
        # fp32-weighted norms; q/k/v/o bias (attention_bias), head_dim 24 (a key Olmo2Config
        # lacks but its attention reads).
        ("olmo2", 27, Olmo2ForCausalLM,
         Olmo2Config(**COMMON, head_dim=24, attention_bias=True, pad_token_id=0, eos_token_id=2,
                     rope_theta=10000.0), None),
        # OLMo-3: the OLMo-2 block, window 5 on three of four layers (the class's layer_types),
        # the sliding layers rotating with the class's base 500000 and the full one with 10000
        # under linear scaling (config.json rewritten to the 4.x spelling: POST_SAVE).
        ("olmo3", 28, Olmo3ForCausalLM,
         Olmo3Config(**{**COMMON, "num_hidden_layers": 4}, sliding_window=5, pad_token_id=0, eos_token_id=2,
                     rope_theta=10000.0, rope_scaling={"rope_type": "linear", "factor": 2.0}), None),
        # GLM-4: sandwich norms under GLM's names, one gate_up_proj, q/k/v bias (o_proj none),
        # RoPE on interleaved pairs of the first half of each head (head_dim 24: 12 rotated).
        ("glm4", 29, Glm4ForCausalLM,
         Glm4Config(**COMMON, head_dim=24, pad_token_id=0, eos_token_id=2, rope_theta=10000.0), None),
        ("granite", 24, GraniteForCausalLM,
         GraniteConfig(**COMMON, embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.09,
                       logits_scaling=8.0, attention_bias=True, tie_word_embeddings=True), None),
        rope_llama("rope_linear", 31, {"rope_type": "linear", "factor": 2.0}),
        # max_position_embeddings 8 < SEQ: the dynamic base grows with the sequence.
        rope_llama("rope_dynamic", 32, {"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=8),
        rope_llama("rope_yarn", 33, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8,
                                     "beta_fast": 8.0}, max_position_embeddings=32),
        rope_llama("rope_yarn_mscale", 34, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8,
                                            "mscale": 0.9, "mscale_all_dim": 0.6}, max_position_embeddings=32),
        rope_llama("rope_longrope", 35, {"rope_type": "longrope", "original_max_position_embeddings": 8,
                                         "short_factor": [1.0 + 0.1 * i for i in range(8)],
                                         "long_factor": [1.5 + 0.4 * i for i in range(8)]}, max_position_embeddings=64),
        ("gemma2", 41, Gemma2ForCausalLM,
         Gemma2Config(**{**COMMON, "num_hidden_layers": 3}, head_dim=24, query_pre_attn_scalar=20, sliding_window=5,
                      attn_logit_softcapping=1.5, final_logit_softcapping=3.0, hidden_activation="gelu_pytorch_tanh",
                      pad_token_id=0), None),
        ("phi3", 51, Phi3ForCausalLM,
         Phi3Config(**{**COMMON, "max_position_embeddings": 64}, pad_token_id=0, sliding_window=7,
                    original_max_position_embeddings=8, partial_rotary_factor=0.5,
                    rope_scaling={"type": "longrope", "short_factor": [1.0 + 0.1 * i for i in range(4)],
                                  "long_factor": [1.5 + 0.4 * i for i in range(4)]}), None),
        ("gemma3", 61, Gemma3ForCausalLM,
         Gemma3TextConfig(**{**COMMON, "num_hidden_layers": 3}, head_dim=24, query_pre_attn_scalar=20, sliding_window=5,
                          layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                          rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
                                           "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
                          pad_token_id=0), None),
        # Gemma-3 as its 4B/12B/27B checkpoints ship: Gemma3ForConditionalGeneration, the same
        # text model beside a tiny SigLIP vision tower and projector (docs/model.md, "Multimodal
        # checkpoints"). Odyssey trains the text model; the text-only batch never reaches the
        # vision tower, whose parameters get no gradient.
        ("gemma3_mm", 62, Gemma3ForConditionalGeneration,
         Gemma3Config(text_config=dict(**{**COMMON, "num_hidden_layers": 3}, head_dim=24, query_pre_attn_scalar=20,
                                       sliding_window=5,
                                       layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                                       rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                           "rope_theta": 1000000.0},
                                                        "sliding_attention": {"rope_type": "default",
                                                                              "rope_theta": 10000.0}},
                                       pad_token_id=0),
                      vision_config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                         num_attention_heads=2, image_size=28, patch_size=14),
                      mm_tokens_per_image=4, image_token_index=VOCAB - 1, boi_token_index=VOCAB - 3,
                      eoi_token_index=VOCAB - 2), None),
        # Mistral-Small-3.1/3.2 ship as Mistral3ForConditionalGeneration (Mistral text model,
        # Pixtral vision tower) with their own lm_head and no tie_word_embeddings in config.json,
        # whose Mistral3Config default is true: transformers finds both tensors, unlike, and
        # leaves them untied (POST_SAVE drops the key as the hub's file lacks it). mistral3_tied:
        # config.json silent too, no lm_head stored, so the default holds: tied.
        ("mistral3_mm", 63, Mistral3ForConditionalGeneration,
         Mistral3Config(text_config=dict(**COMMON, head_dim=24, sliding_window=None, rope_theta=1000000000.0),
                        vision_config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                           num_attention_heads=2, head_dim=16, image_size=28, patch_size=14),
                        image_token_index=VOCAB - 1, tie_word_embeddings=False), None),
        ("mistral3_tied", 64, Mistral3ForConditionalGeneration,
         Mistral3Config(text_config=dict(**COMMON, sliding_window=None),
                        vision_config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                           num_attention_heads=2, head_dim=16, image_size=28, patch_size=14),
                        image_token_index=VOCAB - 1), None),
        # LLaVA: a Llama (or Mistral, Qwen2) text model beside a CLIP tower; tied here through its
        # text_config (LlavaConfig takes either).
        ("llava_mm", 65, LlavaForConditionalGeneration,
         LlavaConfig(text_config=dict(**{**COMMON, "num_key_value_heads": 4}, model_type="qwen2",
                                      tie_word_embeddings=True),
                     vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=48,
                                        num_hidden_layers=2, num_attention_heads=2, image_size=28, patch_size=14,
                                        projection_dim=32),
                     image_token_index=VOCAB - 1, vision_feature_layer=-1), None),
        # Qwen2.5-VL as transformers 5.17 saves it: text_config (model_type qwen2_5_vl_text, RoPE
        # "mrope" in three sections), the text model under its own names (model.X, lm_head) and
        # the vision tower under visual.; text batches give every section the same position.
        ("qwen2_5_vl_mm", 67, Qwen2_5_VLForConditionalGeneration,
         Qwen2_5_VLConfig(text_config=dict(**COMMON, rope_theta=1000000.0,
                                           rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
                          vision_config=dict(depth=1, hidden_size=32, intermediate_size=48, num_heads=2,
                                             out_hidden_size=64, patch_size=14, fullatt_block_indexes=[0]),
                          image_token_id=VOCAB - 1, video_token_id=VOCAB - 2, vision_start_token_id=VOCAB - 3,
                          vision_end_token_id=VOCAB - 4), None),
        # Qwen2-VL with the flat config.json its hub checkpoints ship (POST_SAVE: the text
        # model's keys at the top, rope_scaling {"type": "mrope"}), tied.
        ("qwen2_vl_flat", 68, Qwen2VLForConditionalGeneration,
         Qwen2VLConfig(text_config=dict(**COMMON, rope_theta=10000.0, tie_word_embeddings=True,
                                        rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
                       vision_config=dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2,
                                          patch_size=14),
                       image_token_id=VOCAB - 1, video_token_id=VOCAB - 2, vision_start_token_id=VOCAB - 3,
                       vision_end_token_id=VOCAB - 4, tie_word_embeddings=True), None),
        # Qwen3-VL as transformers 5.17 saves it: a Qwen3 text model (q/k norms, head_dim 24)
        # under model.language_model., interleaved multimodal RoPE sections, the vision tower
        # (with its deepstack mergers, which feed early layers only at image tokens) under
        # model.visual.
        ("qwen3_vl_mm", 69, Qwen3VLForConditionalGeneration,
         Qwen3VLConfig(text_config=dict(**COMMON, head_dim=24, rope_theta=5000000.0,
                                        rope_scaling={"rope_type": "default", "mrope_section": [4, 4, 4],
                                                      "mrope_interleaved": True}),
                       vision_config=dict(depth=1, hidden_size=32, intermediate_size=48, num_heads=2,
                                          out_hidden_size=64, patch_size=16, num_position_embeddings=16,
                                          deepstack_visual_indexes=[0]),
                       image_token_id=VOCAB - 1, video_token_id=VOCAB - 2, vision_start_token_id=VOCAB - 3,
                       vision_end_token_id=VOCAB - 4, tie_word_embeddings=False), None),
        # A text model whose config ties lm_head to the embedding while its weights hold an
        # lm_head of their own (a conversion that kept both): transformers keeps them apart.
        ("tied_own_head", 66, LlamaForCausalLM,
         LlamaConfig(**COMMON, tie_word_embeddings=False), None),
    ] + moe_models()


DROP = object()


def edit_config(**changes):
    """config.json rewritten with `changes` (a value of DROP removes the key)."""
    def post(d):
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        for key, value in changes.items():
            if value is DROP:
                cfg.pop(key)
            else:
                cfg[key] = value
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
    return post


def flatten_text_config(d):
    """config.json as Qwen2-VL's hub checkpoints write it: text_config's keys at the top level,
    multimodal RoPE as rope_scaling {"type": "mrope", "mrope_section"} beside rope_theta."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    text = cfg.pop("text_config")
    rope = text.pop("rope_parameters")
    text.pop("model_type", None)
    text["rope_theta"] = rope["rope_theta"]
    text["rope_scaling"] = {"type": "mrope", "mrope_section": rope["mrope_section"]}
    cfg.update(text)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


# Changes to config.json after save_pretrained, before the reference loads the directory.
POST_SAVE = {"mistral3_mm": edit_config(tie_word_embeddings=DROP), "mistral3_tied": edit_config(tie_word_embeddings=DROP),
             "tied_own_head": edit_config(tie_word_embeddings=True), "qwen2_vl_flat": flatten_text_config,
             # OLMo-3's RoPE in the transformers 4.x spelling, which Olmo3Config reads as the
             # model in memory has it (rope_scaling for the full layers, the class's base for the
             # sliding ones).
             "olmo3": edit_config(rope_parameters=DROP, rope_theta=10000.0,
                                  rope_scaling={"rope_type": "linear", "factor": 2.0})}


# Mixture-of-experts models (issue 27, docs/moe.md): odd expert counts, top-k 1, 2 and 8, the
# shared expert on and off, dense layers among MoE ones (mlp_only_layers, decoder_sparse_step),
# norm_topk_prob both ways; output_router_logits on, so the loss includes the load-balancing
# loss (a large router_aux_loss_coef makes its gradient visible). Saved as transformers 5.17
# saves them: one tensor per expert.
def moe_models():
    return [
        ("qwen3_moe", 71, Qwen3MoeForCausalLM,
         Qwen3MoeConfig(**{**COMMON, "num_hidden_layers": 3}, head_dim=24, num_experts=5, num_experts_per_tok=2,
                        moe_intermediate_size=40, norm_topk_prob=True, mlp_only_layers=[1], output_router_logits=True,
                        router_aux_loss_coef=0.5, tie_word_embeddings=False), None),
        ("qwen3_moe_top8", 72, Qwen3MoeForCausalLM,
         Qwen3MoeConfig(**COMMON, num_experts=9, num_experts_per_tok=8, moe_intermediate_size=24, norm_topk_prob=False,
                        decoder_sparse_step=2, output_router_logits=True, router_aux_loss_coef=0.3,
                        tie_word_embeddings=True), None),
        ("qwen2_moe", 73, Qwen2MoeForCausalLM,
         Qwen2MoeConfig(**COMMON, num_experts=3, num_experts_per_tok=1, moe_intermediate_size=40,
                        shared_expert_intermediate_size=56, output_router_logits=True, router_aux_loss_coef=0.5,
                        tie_word_embeddings=False), None),
        ("mixtral", 74, MixtralForCausalLM,
         MixtralConfig(**COMMON, num_local_experts=7, num_experts_per_tok=2, output_router_logits=True, eos_token_id=2,
                       router_aux_loss_coef=0.5, tie_word_embeddings=False), None),
    ]


def models():
    return [
        ("qwen2", 11, Qwen2ForCausalLM,
         Qwen2Config(**COMMON, tie_word_embeddings=True, rope_theta=10000.0), "60KB"),
        ("qwen3", 12, Qwen3ForCausalLM,
         Qwen3Config(**COMMON, head_dim=32, tie_word_embeddings=False, rope_theta=1000000.0), None),
        ("llama3", 13, LlamaForCausalLM,
         LlamaConfig(**{**COMMON, "num_hidden_layers": 3}, tie_word_embeddings=False,
                     rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
                     rope_theta=500000.0), None),
    ]


def perturb(model, seed):
    # HF initializes biases to 0 and norms to 1, which would hide a missing bias or norm
    # weight; give every parameter a random value.
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)


def batch(seed):
    """Three rows of SEQ tokens: full, right-padded (10 tokens), left-padded (6 tokens)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (3, SEQ), generator=g)
    mask = torch.ones(3, SEQ, dtype=torch.long)
    mask[1, 10:] = 0
    mask[2, :SEQ - 6] = 0
    ids = ids.masked_fill(mask == 0, 0)
    labels = ids.masked_fill(mask == 0, -100)
    nopad = torch.randint(1, VOCAB, (2, SEQ), generator=g)
    return ids, mask, labels, nopad


def text_parameters(model):
    """(name, parameter) of the language model under the text model's names: a multimodal
    wrapper's model.language_model.X as model.X, its vision tower and projector left out."""
    for name, p in model.named_parameters():
        if name.startswith("model.language_model."):
            yield "model." + name[len("model.language_model."):], p
        elif not name.startswith(("model.vision_tower.", "model.multi_modal_projector.", "model.visual.")):
            yield name, p


def run(model, ids, mask, labels, nopad, device):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device))
    out.loss.backward()
    t = {"logits": out.logits.detach().float().cpu().contiguous(), "loss": out.loss.detach().float().cpu().reshape(1)}
    if getattr(out, "aux_loss", None) is not None:  # MoE: the load-balancing loss (already in out.loss)
        t["aux_loss"] = out.aux_loss.detach().float().cpu().reshape(1)
    for name, p in text_parameters(model):
        t["grad." + name] = p.grad.detach().float().cpu().contiguous()
    with torch.no_grad():
        t["nopad.logits"] = model(input_ids=nopad.to(device)).logits.float().cpu().contiguous()
    # The unpadded batch trained on: its loss and gradients (the oracle of the padding-free
    # training row, e.g. with kept attention).
    model.zero_grad(set_to_none=True)
    out = model(input_ids=nopad.to(device), labels=nopad.to(device))
    out.loss.backward()
    t["nopad.loss"] = out.loss.detach().float().cpu().reshape(1)
    for name, p in text_parameters(model):
        t["nopad.grad." + name] = p.grad.detach().float().cpu().contiguous()
    return t


def write_bad_wrapper(out, good):
    """The multimodal Gemma-3 broken two ways: a language-model tensor removed, and text_config
    saying one layer fewer than the weights hold."""
    st = "model.safetensors"
    sd = load_file(os.path.join(good, st))
    d = os.path.join(out, "bad_mm_missing")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(good, d)
    save_file({k: v for k, v in sd.items() if k != "language_model.model.layers.1.mlp.up_proj.weight"},
              os.path.join(d, st), metadata={"format": "pt"})
    d = os.path.join(out, "bad_mm_layers")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(good, d)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["text_config"]["num_hidden_layers"] = 2
    cfg["text_config"]["layer_types"] = cfg["text_config"]["layer_types"][:2]
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def write_bad(out, good_single, good_sharded):
    """Broken copies of good models: each must give an error naming the file and tensor."""
    def copy(src, name):
        d = os.path.join(out, name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        return d

    st = "model.safetensors"
    sd = load_file(os.path.join(good_single, st))
    victim = "model.layers.0.mlp.up_proj.weight"

    d = copy(good_single, "bad_missing")
    save_file({k: v for k, v in sd.items() if k != victim}, os.path.join(d, st), metadata={"format": "pt"})
    d = copy(good_single, "bad_extra")
    save_file({**sd, "model.layers.0.mlp.extra_proj.weight": torch.zeros(4, 4)}, os.path.join(d, st),
              metadata={"format": "pt"})
    d = copy(good_single, "bad_shape")
    save_file({**sd, victim: torch.zeros(sd[victim].shape[0] + 1, sd[victim].shape[1])}, os.path.join(d, st),
              metadata={"format": "pt"})
    d = copy(good_single, "bad_dtype")
    save_file({**sd, victim: sd[victim].to(torch.int64)}, os.path.join(d, st), metadata={"format": "pt"})
    d = copy(good_single, "bad_arch")
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["architectures"] = ["MambaForCausalLM"]
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    moe = os.path.join(out, "qwen3_moe")
    if os.path.isdir(moe):  # MoE checkpoints (issue 27): an expert missing, a router of the wrong shape, top-k > experts
        msd = load_file(os.path.join(moe, st))
        d = copy(moe, "bad_moe_missing_expert")
        save_file({k: v for k, v in msd.items() if k != "model.layers.0.mlp.experts.3.up_proj.weight"},
                  os.path.join(d, st), metadata={"format": "pt"})
        d = copy(moe, "bad_moe_router")
        router = "model.layers.2.mlp.gate.weight"
        save_file({**msd, router: msd[router][:4].contiguous()}, os.path.join(d, st), metadata={"format": "pt"})
        d = copy(moe, "bad_moe_topk")
        cfg = json.load(open(os.path.join(d, "config.json")))
        cfg["num_experts_per_tok"] = 6
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
        # transformers 5's stacked layout (experts.gate_up_proj / down_proj), as the model's own
        # parameters name them: the same model, the other layout on disk.
        d = copy(moe, "qwen3_moe_stacked")
        m = Qwen3MoeForCausalLM.from_pretrained(moe, dtype=torch.float32)
        save_file({k: v.detach().contiguous() for k, v in m.state_dict().items()}, os.path.join(d, st),
                  metadata={"format": "pt"})
    d = copy(good_sharded, "bad_truncated")
    shard = sorted(f for f in os.listdir(d) if f.startswith("model-") and f.endswith(".safetensors"))[-1]
    p = os.path.join(d, shard)
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(size - 100)


SCORE_TEXTS = [
    "The quick brown fox jumps over the lazy dog while the model predicts the next token.",
    "Long-context fine-tuning needs the loss summed over valid tokens and divided once.",
    "naïve café — 日本語のテキスト, emoji 🚀 and tabs\tand\nnewlines",
    "def f(x):\n    return x * 2  # code",
    "a",
]


def add_tokenizer_and_scores(out, model_dir, cls):
    """A byte-level BPE tokenizer (GPT-2 style, < VOCAB ids) for the tiny Qwen2 and HF's
    per-sample mean loss of SCORE_TEXTS: model(ids, labels=ids).loss, ids =
    tokenizer(text)["input_ids"] (HF's default add_special_tokens=True)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    corpus = [open(__file__, encoding="utf-8").read()] + SCORE_TEXTS * 3
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 12, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    fast.save_pretrained(model_dir)
    m = cls.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    rows = []
    with open(os.path.join(out, "score.jsonl"), "w", encoding="utf-8") as f:
        for t in SCORE_TEXTS:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
            ids = fast(t)["input_ids"]
            loss = None
            if len(ids) > 1:
                with torch.no_grad():
                    x = torch.tensor([ids])
                    loss = m(input_ids=x, labels=x).loss.item()
            rows.append({"ids": ids, "loss": loss})
    json.dump({"samples": rows}, open(os.path.join(out, "qwen2.score.json"), "w"), indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--bad", action="store_true", help="also write the broken copies")
    ap.add_argument("--base-only", action="store_true", help="only qwen2, qwen3 and llama3 (not the other families)")
    ap.add_argument("--only", default="", help="comma-separated model names to write")
    args = ap.parse_args()
    if transformers.__version__ != PINNED:
        print(f"make_tiny_models.py: transformers {transformers.__version__} found, {PINNED} pinned", file=sys.stderr)
        return 3
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)
    dtype = getattr(torch, args.dtype)
    dirs = {}
    wanted = models() + ([] if args.base_only else family_models())
    if args.only:
        wanted = [m for m in wanted if m[0] in args.only.split(",")]
    for name, seed, cls, cfg, shard in wanted:
        attn = ATTN.get(name, "sdpa")
        torch.manual_seed(seed)
        cfg._attn_implementation = attn
        m = cls(cfg).float()
        perturb(m, seed)
        d = os.path.join(args.out, name)
        m.save_pretrained(d, max_shard_size=shard) if shard else m.save_pretrained(d)
        if name in POST_SAVE:
            POST_SAVE[name](d)
        dirs[name] = d
        ids, mask, labels, nopad = batch(seed)
        # Token ids as float32 (exact below 2^24): Odyssey's safetensors reader loads floats only.
        ref = {"input_ids": ids.float(), "attention_mask": mask.float(), "labels": labels.float(),
               "nopad.input_ids": nopad.float()}
        m = cls.from_pretrained(d, dtype=dtype, attn_implementation=attn).to(args.device)
        m.train()  # dropout is 0 in these configs; train() only to mirror a training step
        ref.update(run(m, ids, mask, labels, nopad, args.device))
        if dtype != torch.float32:
            m32 = cls.from_pretrained(d, dtype=torch.float32, attn_implementation=attn).to(args.device)
            ref.update({"fp32." + k: v for k, v in run(m32, ids, mask, labels, nopad, args.device).items()})
        save_file({k: v.contiguous() for k, v in ref.items()}, os.path.join(args.out, name + ".reference.safetensors"),
                  metadata={"transformers": transformers.__version__, "torch": torch.__version__,
                            "dtype": args.dtype, "device": args.device})
        print(f"{name}: loss {ref['loss'].item():.6f}, {len(list(m.parameters()))} parameters, dir {d}")
    if args.bad and not args.only:
        write_bad(args.out, dirs["qwen3"], dirs["qwen2"])
        write_bad_wrapper(args.out, dirs["gemma3_mm"])
        add_tokenizer_and_scores(args.out, dirs["qwen2"], Qwen2ForCausalLM)
    return 0


if __name__ == "__main__":
    sys.exit(main())
