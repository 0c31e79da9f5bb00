#!/usr/bin/env python3
"""Greedy continuations as transformers' generate() computes them: the oracle of Odyssey's
generation engine (tests/core/tst_generate.cpp, core/model/generate.h).

    generate_oracle.py MODELS_DIR NAME[,NAME...] OUT.json [--new-tokens 64]
    generate_oracle.py --prompts MODEL_DIR PROMPTS.jsonl OUT.jsonl [--new-tokens N]

MODELS_DIR holds the tiny random models of make_tiny_models.py. For each NAME, in fp32 on the
CPU, a batch of three prompts of different lengths (5, 12 and 9 random ids; transformers pads
them on the left, as generate() wants) is continued by generate(do_sample=False) for
--new-tokens tokens (fewer where max_position_embeddings leaves less room), with no
end-of-sequence id; then again with the 10th new token of the first row as the
end-of-sequence id (a row stops after it; the ids after it, transformers' padding, are
dropped here). For "qwen2" a LoRA adapter is also made (PEFT, r 4 on all linear layers, its B
matrices random so the adapter changes the output), saved under MODELS_DIR/qwen2_lora, and
the batch continued through PeftModel.

OUT.json: {NAME: {"prompts": [[ids]...], "new_tokens": N, "greedy": [[ids]...],
"eos": ID, "greedy_eos": [[ids]...], "min_margin": [...]}, "qwen2_lora": {..., "loss": [per prompt]}},
where "loss" is PEFT's model(ids, labels=ids).loss of each prompt through the adapter, and
min_margin per row is the smallest gap between the two best logits over the steps (how near
a tie the greedy choice came; a mismatch at a gap of ~1e-6 would be rounding, not a bug).

--prompts: what `odyssey-train generate --model MODEL_DIR --prompts PROMPTS.jsonl` must print,
line by line: {"prompt_ids": ids} as given, {"prompt": text} is tokenizer(text) (special tokens added), {"messages": [...]} is
apply_chat_template(messages, add_generation_prompt=True) (a last assistant turn taken off),
each continued alone by generate(do_sample=False) with generation_config.json's end-of-sequence
ids; OUT.jsonl lines {"ids": new ids up to and including the first end-of-sequence id,
"text": tokenizer.decode(ids, skip_special_tokens=True)}. --load-in-4bit nf4|fp4: every decoder projection
holds bitsandbytes' quantized-then-dequantized weight (blocks of 64 over the flattened weight, double
quantization) and computes in fp32, as a 4-bit base with an fp32 compute dtype does.

Pinned: transformers 5.17.0, peft 0.21.0, torch 2.11.
"""
import argparse
import json
import os
import sys

import torch

import transformers
from transformers import AutoModelForCausalLM

ATTN = {"gemma2": "eager"}  # soft-capped attention: transformers needs eager (as make_tiny_models.py)
PROMPT_LENGTHS = (5, 12, 9)


def prompts(seed, vocab):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, vocab, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]


def run(model, rows, new_tokens, eos):
    longest = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), longest, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, longest - len(r):] = torch.tensor(r)
        mask[i, longest - len(r):] = 1
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=new_tokens,
                             min_new_tokens=0, eos_token_id=eos, pad_token_id=0, output_scores=True,
                             return_dict_in_generate=True, top_k=None, top_p=None, temperature=None)
    new = out.sequences[:, longest:].tolist()
    margins = [float("inf")] * len(rows)
    for step, scores in enumerate(out.scores):
        top2 = scores.float().topk(2, dim=-1).values
        for i in range(len(rows)):
            if step < len(new[i]):
                margins[i] = min(margins[i], float(top2[i, 0] - top2[i, 1]))
    if eos is not None:  # keep each row up to and including its first end-of-sequence id
        new = [r[:r.index(eos) + 1] if eos in r else r for r in new]
    return new, margins


def oracle(load, rows, new_tokens):
    """load() gives a fresh model for each run: transformers' dynamic RoPE keeps the longest
    scaling it has seen in the module, so a second generate() on the same object would start
    from the first one's."""
    greedy, margins = run(load(), rows, new_tokens, None)
    eos = greedy[0][min(9, len(greedy[0]) - 1)]
    greedy_eos, _ = run(load(), rows, new_tokens, eos)
    return {"prompts": rows, "new_tokens": new_tokens, "greedy": greedy, "eos": eos, "greedy_eos": greedy_eos,
            "min_margin": margins}


def prompts_oracle(model_dir, prompts_file, out_file, new_tokens, load_in_4bit=None):
    from transformers import AutoTokenizer, GenerationConfig
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa").eval()
    if load_in_4bit:
        # Every decoder projection quantized and dequantized by bitsandbytes (blocks of 64 over the
        # flattened weight, double quantization), computing in fp32: what load_in_4bit holds and
        # multiplies with an fp32 compute dtype. Not through transformers' load_in_4bit on the CPU:
        # bitsandbytes 0.50.2's CPU quantize_4bit of a 2-d weight whose rows are not a multiple of 64
        # long is wrong (a [64, 96] down_proj came back with a max error of 0.42 where the flattened
        # weight gives 0.08), and its CPU 4-bit matmul fails on some shapes.
        import bitsandbytes.functional as bnbf
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".layers." in name and name.endswith("proj.weight"):
                    q, st = bnbf.quantize_4bit(p.data.reshape(-1), blocksize=64, compress_statistics=True,
                                               quant_type=load_in_4bit)
                    p.copy_(bnbf.dequantize_4bit(q, st).reshape(p.shape))
    eos = GenerationConfig.from_pretrained(model_dir).eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    with open(prompts_file, encoding="utf-8") as f, open(out_file, "w", encoding="utf-8") as out:
        for line in f:
            if not line.strip():
                continue
            j = json.loads(line)
            if "prompt_ids" in j:
                ids = j["prompt_ids"]
            elif "prompt" in j:
                ids = tok(j["prompt"])["input_ids"]
            else:
                msgs = j["messages"]
                if msgs[-1]["role"] == "assistant":
                    msgs = msgs[:-1]
                ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
            x = torch.tensor([ids])
            with torch.no_grad():
                seq = model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                                     max_new_tokens=new_tokens, eos_token_id=eos, pad_token_id=eos[0] if eos else 0,
                                     top_k=None, top_p=None, temperature=None)
            new = seq[0, len(ids):].tolist()
            for i, t in enumerate(new):
                if t in eos:
                    new = new[:i + 1]
                    break
            out.write(json.dumps({"ids": new, "text": tok.decode(new, skip_special_tokens=True)}, ensure_ascii=False)
                      + "\n")
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--prompts":
        ap = argparse.ArgumentParser()
        ap.add_argument("--prompts", nargs=3, metavar=("MODEL_DIR", "PROMPTS", "OUT"))
        ap.add_argument("--new-tokens", type=int, default=32)
        ap.add_argument("--load-in-4bit", choices=["nf4", "fp4"])
        a = ap.parse_args()
        return prompts_oracle(*a.prompts, a.new_tokens, a.load_in_4bit)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models_dir")
    ap.add_argument("names")
    ap.add_argument("out")
    ap.add_argument("--new-tokens", type=int, default=64)
    args = ap.parse_args()
    if transformers.__version__ != "5.17.0":
        print(f"generate_oracle.py: transformers {transformers.__version__} found, 5.17.0 pinned", file=sys.stderr)
        return 3
    torch.manual_seed(0)
    result = {}
    for name in args.names.split(","):
        d = os.path.join(args.models_dir, name)

        def load(d=d, name=name):
            return AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                        attn_implementation=ATTN.get(name, "sdpa")).eval()
        cfg = load().config
        rows = prompts(1000 + len(result), cfg.vocab_size)
        room = cfg.max_position_embeddings - max(PROMPT_LENGTHS)
        rope = getattr(cfg, "rope_parameters", None) or {}
        if isinstance(rope, dict) and rope.get("rope_type") == "dynamic":
            room = args.new_tokens  # dynamic NTK scaling is meant to run past max_position_embeddings
        n = min(args.new_tokens, room)
        result[name] = oracle(load, rows, n)
        print(f"{name}: {n} new tokens, min margin {min(result[name]['min_margin']):.2e}")
        if name == "qwen2":
            from peft import LoraConfig, PeftModel, get_peft_model
            torch.manual_seed(7)
            peft_model = get_peft_model(load(), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                                           lora_dropout=0.0))
            with torch.no_grad():
                for pname, p in peft_model.named_parameters():
                    if "lora_B" in pname:
                        p.normal_(0.0, 0.2)
            adapter_dir = os.path.join(args.models_dir, "qwen2_lora")
            peft_model.save_pretrained(adapter_dir)
            result["qwen2_lora"] = oracle(lambda: PeftModel.from_pretrained(load(), adapter_dir).eval(), rows, n)
            # The mean next-token loss of each prompt through the adapter (score --adapter).
            peft_loaded = PeftModel.from_pretrained(load(), adapter_dir).eval()
            with torch.no_grad():
                result["qwen2_lora"]["loss"] = [
                    float(peft_loaded(input_ids=torch.tensor([r]), labels=torch.tensor([r])).loss) for r in rows]
            result["qwen2_lora"]["adapter"] = adapter_dir
            print(f"qwen2_lora: min margin {min(result['qwen2_lora']['min_margin']):.2e}")
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
