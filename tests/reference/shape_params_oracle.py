#!/usr/bin/env python3
"""How many parameters transformers builds for a config.json: the oracle of the bundled model
shapes' parameter counts (resources/model-shapes; tests/core/tst_model_config.cpp,
bundledShapesCountAsTransformersBuildsThem).

Usage: shape_params_oracle.py CONFIG_JSON...   (each a config.json path)
Prints one JSON object: path -> {"parameters": N, "layers": L} with N the number of distinct
parameter elements AutoModelForCausalLM.from_config builds on the meta device (tied embeddings
counted once, as a checkpoint stores them). A wrapper config (a vision-language model) is built
as its text model: its `text_config`, or the file itself for Qwen2.5-VL's flat form.
"""
import json
import sys
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM  # noqa: E402

transformers.logging.set_verbosity_error()


def count(path):
    c = AutoConfig.from_pretrained(path)
    outer = c
    text = getattr(c, "text_config", None)
    if text is not None:
        c = text
    if getattr(c, "head_dim", 0) is None:  # MinistralConfig, see family_defaults_oracle.py
        c.head_dim = c.hidden_size // c.num_attention_heads
    with torch.device("meta"):
        try:
            m = AutoModelForCausalLM.from_config(c)
            head = 0
        except ValueError:
            # A text config without a causal-LM class of its own (Qwen2.5-VL's): its decoder
            # stack, plus the lm_head the wrapper puts on it unless tied to the embeddings.
            m = AutoModel.from_config(c)
            tied = getattr(c, "tie_word_embeddings", getattr(outer, "tie_word_embeddings", False))
            head = 0 if tied else c.vocab_size * c.hidden_size
    n = sum(p.numel() for p in m.parameters()) + head  # parameters() yields a tied tensor once
    return {"parameters": n, "layers": c.num_hidden_layers, "class": type(m).__name__}


out = {}
for p in sys.argv[1:]:
    try:
        out[p] = count(p)
    except Exception as e:  # reported per file: the test names it
        out[p] = {"error": f"{type(e).__name__}: {e}"}
print(json.dumps(out))
