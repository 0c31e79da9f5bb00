#!/usr/bin/env python3
"""Writes the quickstart's tiny model: resources/quickstart/model/ (the `model:` of
presets/quickstart.yaml, trained on the CPU in about a minute by `odyssey-train run`).

    $HOME/.cache/odyssey/venv-torch-2.11.0/bin/python resources/quickstart/make_model.py [OUT_DIR]

OUT_DIR defaults to resources/quickstart/model next to this script. Pinned (setup.sh installs
them in the venv above): transformers 5.17.0, tokenizers 0.23.3, torch 2.11 (CPU),
safetensors 0.8.0. Deterministic: running it again with these pins reproduces every file byte
for byte (compare with `sha256sum OUT_DIR/*`); other versions are refused, since their init,
trainer or file layout may differ.

What it writes:

  tokenizer.json         byte-level BPE shaped exactly like Qwen2.5's: NFC normalizer,
                         Split(Qwen2's regex, isolated) + ByteLevel(add_prefix_space=false,
                         use_regex=false) pre-tokenizer, ByteLevel decoder and post-processor,
                         BPE without byte fallback over the 256-byte alphabet; trained here with
                         HF `tokenizers` on the quickstart data (data/train.jsonl and
                         data/val.jsonl rendered as ChatML) plus generated English sentences
                         (the data alone only has ~220 merges' worth of words). The added
                         tokens <|endoftext|>, <|im_start|>, <|im_end|> come last, as in Qwen
                         (ids VOCAB-3, VOCAB-2, VOCAB-1); total vocabulary = config vocab_size.
  tokenizer_config.json  eos <|im_end|>, pad <|endoftext|>, no bos, tokenizer_class
                         Qwen2Tokenizer, and a ChatML chat_template written here: like
                         Qwen2.5's for system/user/assistant turns but with no injected default
                         system prompt (a conversation without a system message has no system
                         turn).
  config.json, model.safetensors, generation_config.json
                         a random-initialised Qwen2ForCausalLM (torch seed 0, transformers'
                         own init): hidden 128, 4 layers, 4 heads, 2 KV heads, intermediate
                         352, q/k/v bias, tied embeddings, 2048 positions, float32 (~3.5 MB).

The data files come from make_data.py (run that first if they change).
"""
import json
import os
import random
import sys

PINS = {"transformers": "5.17.0", "tokenizers": "0.23.3"}
HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = 1024
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# ChatML. Every turn: <|im_start|>ROLE\nCONTENT<|im_end|>\n; the generation prompt opens an
# assistant turn. Unlike Qwen2.5's template no system turn is added when there is none.
CHAT_TEMPLATE = (
    "{%- for message in messages %}\n"
    "    {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n")

# Common English words for the generated part of the tokenizer corpus.
ENGLISH = """
the of and to in is was for that with as on by at from his her it an were are which this be or has had
not but what all when we there can been one would will their who you more if no out so said up about
into than them only other new some could time these two may first then do any like my now over such our
man me even most made after also did many before must through back years where much your way well down
should because each just those people how too little state good very make world still own see men work
long get here between both life being under never day same another know while last might us great old
year off come since against go came right used take three small large number answer question word letter
letters count reverse result add plus times multiply sum total equal zero four five six seven eight nine
ten eleven twelve twenty thirty forty fifty hundred thousand apple river stone cloud tiger paper music
garden silver window orange planet candle forest dragon pencil mirror rocket violin castle water house
school mother father friend family children city country morning evening night today tomorrow yesterday
please thank hello goodbye yes sorry help write read learn teach model train training data token tokens
text sentence example simple short quick answer answers correct wrong true false because therefore each
every always sometimes often never open close begin start stop end finish play watch listen speak tell
ask give find think feel want need try call move live believe hold bring happen turn follow change show
hear keep let seem leave put mean become include continue set remain create build grow lose pay meet run
walk sit stand understand green blue red yellow white black brown bright dark warm cold happy sad fast slow
early late easy hard strong weak young important different possible public national political local
social general special certain clear whole free full real best better true sure able human major economic
natural personal physical single similar recent common available likely modern difficult
"""


def check_pins():
    import tokenizers
    import transformers
    found = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__}
    bad = [f"{k} {found[k]} found, {v} pinned" for k, v in PINS.items() if found[k] != v]
    if bad:
        print("make_model.py: " + "; ".join(bad), file=sys.stderr)
        sys.exit(3)


def read_conversations():
    """The data's conversations as messages (val.jsonl is alpaca: instruction (+ input) -> user)."""
    convs = []
    with open(os.path.join(HERE, "data", "train.jsonl"), encoding="utf-8") as f:
        convs += [json.loads(line)["messages"] for line in f if line.strip()]
    with open(os.path.join(HERE, "data", "val.jsonl"), encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                user = r["instruction"] + ("\n" + r["input"] if r.get("input") else "")
                convs.append([{"role": "user", "content": user}, {"role": "assistant", "content": r["output"]}])
    return convs


def chatml(messages):
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def english(seed, lines):
    rng = random.Random(seed)
    words = ENGLISH.split()
    out = []
    for _ in range(lines):
        s = " ".join(rng.choice(words) for _ in range(rng.randint(4, 14)))
        out.append(s[0].upper() + s[1:] + rng.choice([".", "?", "!", ","]))
    return out


def build_tokenizer(texts):
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                            processors, trainers)
    tok = Tokenizer(models.BPE(dropout=None, unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                               fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    # The special tokens are cut out of the texts before training (they are added tokens, never
    # merged), then added after the BPE vocabulary, at the end as in Qwen.
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - len(SPECIALS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    pieces = []
    for t in texts:
        for s in SPECIALS:
            t = t.replace(s, "\x00")
        pieces += [p for p in t.split("\x00") if p]
    tok.train_from_iterator(pieces, trainer)
    n = tok.get_vocab_size(with_added_tokens=True)
    if n != VOCAB - len(SPECIALS):
        sys.exit(f"make_model.py: the BPE trainer stopped at {n} tokens, {VOCAB - len(SPECIALS)} wanted: "
                 "the corpus has too few distinct words")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    # The trainer resets these; Qwen2.5's file has empty strings and trim_offsets false, and a
    # decoder with its flags off (decoding ignores them; offsets are not used by Odyssey).
    data = json.loads(tok.to_str())
    data["model"].update(continuing_subword_prefix="", end_of_word_suffix="")
    data["pre_tokenizer"]["pretokenizers"][1]["trim_offsets"] = False
    data["decoder"].update(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok = Tokenizer.from_str(json.dumps(data))
    assert [tok.token_to_id(t) for t in SPECIALS] == list(range(VOCAB - 3, VOCAB))
    assert tok.get_vocab_size(with_added_tokens=True) == VOCAB
    return tok


def tokenizer_config():
    added = {str(VOCAB - len(SPECIALS) + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                               "single_word": False, "special": True}
             for i, t in enumerate(SPECIALS)}
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 2048,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=2)
        f.write("\n")


def build_model(out, tok):
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM
    eot, im_end = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=128, intermediate_size=352, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                      rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu",
                      bos_token_id=eot, eos_token_id=im_end)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).float()
    model.generation_config = GenerationConfig(bos_token_id=eot, eos_token_id=[im_end, eot], pad_token_id=eot)
    model.save_pretrained(out)
    os.chmod(os.path.join(out, "model.safetensors"), 0o644)  # written 0600 through a temporary file
    return model


def check(out, tok, convs):
    """Re-read what was written: transformers' tokenizer must agree with `tokenizers`, the
    template must render ChatML, the model must load and run."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer
    ref = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(out)
    assert len(hf) == VOCAB, len(hf)
    for msgs in convs[:50] + convs[-50:]:
        text = hf.apply_chat_template(msgs, tokenize=False)
        assert text == chatml(msgs), (text, chatml(msgs))
        ids = ref.encode(text, add_special_tokens=False).ids
        assert hf.encode(text, add_special_tokens=False) == ids
        assert ref.decode(ids, skip_special_tokens=False) == text
    gen = hf.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert gen == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", gen
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    ids = torch.tensor([ref.encode(chatml(convs[0])).ids])
    with torch.no_grad():
        loss = model(input_ids=ids, labels=ids).loss.item()
    n = sum(p.numel() for p in model.parameters())
    lens = [len(ref.encode(chatml(c)).ids) for c in convs]
    print(f"{out}: {n} parameters, vocab {VOCAB}, loss of sample 0 {loss:.4f} (ln {VOCAB} = "
          f"{torch.log(torch.tensor(float(VOCAB))).item():.4f}), tokens per conversation {min(lens)}..{max(lens)}")


def main():
    check_pins()
    out = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(HERE, "model")
    os.makedirs(out, exist_ok=True)
    for name in ["config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
                 "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"]:
        if os.path.exists(os.path.join(out, name)):
            os.remove(os.path.join(out, name))
    convs = read_conversations()
    tok = build_tokenizer([chatml(c) for c in convs] + english(11, 3000))
    tok.save(os.path.join(out, "tokenizer.json"), pretty=True)
    write_json(os.path.join(out, "tokenizer_config.json"), tokenizer_config())
    build_model(out, tok)
    check(out, tok, convs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
