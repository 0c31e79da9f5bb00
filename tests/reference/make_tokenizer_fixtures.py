#!/usr/bin/env python3
"""Oracle data for Odyssey's tokenizer and chat templates (tests/core/tst_tokenizer.cpp,
tests/core/tst_chat_template.cpp), produced with the pinned Hugging Face `tokenizers` and
`transformers`.

    make_tokenizer_fixtures.py OUT_DIR            fixtures for the C++ tests
    make_tokenizer_fixtures.py --nfc-tables FILE  regenerate core/tokenizer/unicode_nfc_tables.cpp
    make_tokenizer_fixtures.py --real MODEL_DIR OUT_DIR      expected ids for a real model's tokenizer
    make_tokenizer_fixtures.py --bench TOKENIZER_JSON DOCS_JSON   HF encode throughput

OUT_DIR receives one model directory per tokenizer (tokenizer.json, tokenizer_config.json as
save_pretrained writes them) and expected.json: token ids for held-out texts, decodes,
chat-template texts, ids and assistant masks, and NFC cases. Byte-level BPE tokenizers are
trained here on a generated mixed corpus (English, Chinese, code, emoji, whitespace runs,
combining marks, RTL, unusual Unicode), configured like Qwen2.5 and Llama-3 (and GPT-2's
plain ByteLevel), then re-read from disk so the oracle is what a model directory holds.

The chat templates below are the models' own `chat_template` strings (facts of Qwen2.5,
Qwen3, Llama-3 and Llama-3.1/3.3 Instruct). Assistant masks come from
`apply_chat_template(return_assistant_tokens_mask=True)` with a copy of each template whose
assistant output is wrapped in {% generation %}; the script checks that the copy renders the
same text as the real template for every conversation.
"""
import json
import os
import random
import shutil
import sys
import unicodedata

QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

QWEN25_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

QWEN3_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""

LLAMA3_TEMPLATE = (r"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
                   r"'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim"
                   r" + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
                   r"{{ content }}{% endfor %}{% if add_generation_prompt %}"
                   r"{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

LLAMA31_TEMPLATE = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""


def replace_once(text, old, new):
    assert text.count(old) == 1, f"template marker not found exactly once: {old!r}"
    return text.replace(old, new)


def replace_between(text, start, end, new):
    i = text.index(start)
    j = text.index(end, i) + len(end)
    return text[:i] + new + text[j:]


def marked_templates():
    """Copies of the templates with the assistant output (content + end-of-turn token) in
    {% generation %}; checked below to render the same text as the real ones."""
    q25_line = "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    q25 = replace_once(QWEN25_TEMPLATE, q25_line,
                       "        {%- if message.role == 'assistant' %}\n"
                       "            {{- '<|im_start|>' + message.role + '\\n' }}{% generation %}"
                       "{{- message.content + '<|im_end|>' }}{% endgeneration %}{{- '\\n' }}\n"
                       "        {%- else %}\n" + q25_line + "        {%- endif %}\n")
    q3 = replace_between(
        QWEN3_TEMPLATE, "        {%- if loop.index0 > ns.last_query_index %}",
        "        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}",
        "        {{- '<|im_start|>' + message.role + '\\n' }}{% generation %}\n"
        "        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}\n"
        "            {{- '<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
        "        {%- else %}\n"
        "            {{- content }}\n"
        "        {%- endif %}\n"
        "        {{- '<|im_end|>' }}{% endgeneration %}{{- '\\n' }}\n"
        "    {%- elif message.role == \"tool\" %}")
    l31_line = ("        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
                "message['content'] | trim + '<|eot_id|>' }}\n")
    l31 = replace_once(LLAMA31_TEMPLATE, l31_line,
                       "        {%- if message.role == 'assistant' %}\n"
                       "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% generation %}"
                       "{{- message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}\n"
                       "        {%- else %}\n" + l31_line + "        {%- endif %}\n")
    l3 = (r"{% for message in messages %}{% if loop.index0 == 0 %}{{ bos_token }}{% endif %}"
          r"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
          r"{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] | trim + '<|eot_id|>' }}"
          r"{% endgeneration %}{% else %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}"
          r"{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
    return {"qwen2_5": q25, "qwen3": q3, "llama3_1": l31, "llama3": l3}


# ---- corpus ------------------------------------------------------------------------------
WORDS = ("the of and to in is was for that with as on by at from his her it an were are which this be "
         "or has had not but what all when we there can been one would will their who you more if no out "
         "so said up about into than them only other new some could time these two may first then do any "
         "like my now over such our man me even most made after also did many before must through back "
         "years where much your way well down should because each just those people how too little state "
         "good very make world still own see men work long get here between both life being under never "
         "day same another know while last might us great old year off come since against go came right "
         "used take three tokenizer model training gradient memory sequence attention parallel kernel "
         "throughput checkpoint dataset loss optimizer learning rate warmup schedule").split()
CONTRACTIONS = ["don't", "it's", "they'll", "I'm", "we've", "she'd", "You're", "CAN'T", "IT'S", "We'LL",
                "o'clock", "rock'n'roll", "'tis", "isn’t"]
CHINESE = ("我们 今天 学习 机器 学习 模型 训练 数据 长文本 上下文 注意力 机制 并行 计算 内存 优化 "
           "中华人民共和国 北京 上海 深圳 人工智能 自然语言处理 分词器 这是 一个 测试 句子 的 了 在 和 是 "
           "不 有 人 我 他 这 中 大 为 上 个 国 说 们 到 也 时 要 就 出 会 可 你 对 生 能 而 子 那 得 于 着 下 自 之").split()
EMOJI = ["😀", "😂", "🥲", "👍", "👍🏽", "👍🏿", "👋🏻", "❤️", "🔥", "🚀", "🎉", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈",
         "🇯🇵", "🇩🇪", "1️⃣", "#️⃣", "🧑‍🤝‍🧑", "🫠", "✅", "™️", "☕", "🐍", "🦀"]
OTHER = ["Ελληνικά γράμματα", "Привет, мир", "नमस्ते दुनिया", "สวัสดีชาวโลก", "한국어 텍스트", "日本語のテキスト",
         "مرحبا بالعالم", "שלום עולם", "\u200fעברית\u200e", "Ťĥïŝ ïŝ ŵëïŕð", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙", "⠓⠑⠇⠇⠕",
         "┌──┐│  │└──┘", "∀x∈ℝ: x²≥0", "½ ¼ ⅞", "①②③", "ﬁﬂ", "Ａｂｃ１２３", "\u00a0nbsp\u00a0", "zero\u200bwidth",
         "tab\there", "\u3000全角\u3000", "e\u0301 a\u0300 o\u0308", "Cafe\u0301", "\u1100\u1161\u11a8",
         "\uf900\uf901", "\u212b\u2126", "Tiếng Việt có dấu", "ǅǈǋ", "ß ẞ ſ", "\U0001f600\U000e0041", "\ue000\U0010fffd"]
PY_NAMES = ["data", "value", "result", "items", "count", "buffer", "config", "model", "token", "index"]


def prose(rng, n):
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
        if rng.random() < 0.4:
            words.insert(rng.randrange(len(words)), rng.choice(CONTRACTIONS))
        if rng.random() < 0.2:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 10 ** rng.randint(1, 9))))
        s = " ".join(words)
        out.append(s[0].upper() + s[1:] + rng.choice([".", "!", "?", ",", ";", "..."]))
    return " ".join(out)


def chinese(rng, n):
    return "".join(rng.choice(CHINESE) + rng.choice(["", "", "，", "。", "、", "！"]) for _ in range(n))


def code(rng):
    a, b = rng.sample(PY_NAMES, 2)
    if rng.random() < 0.5:
        return (f"def {a}_{b}({a}, {b}=None):\n    \"\"\"Return the {b}.\"\"\"\n    if {b} is None:\n"
                f"        {b} = [{rng.randint(0, 99)}, {rng.randint(0, 999)}]\n    for i in range(len({a})):\n"
                f"        {b}.append({a}[i] * {rng.random():.3f})\n    return {b}  # done\n")
    return (f"#include <vector>\n\ntemplate <typename T>\nstatic int {a}_{b}(const std::vector<T>& {a}) {{\n"
            f"\tint {b} = {rng.randint(0, 9999)};\n\tfor (auto& x : {a}) {{ {b} += x << 2; }}\n"
            f"\treturn {b} != 0 ? {b} : -1; // {rng.choice(WORDS)}\n}}\n")


def whitespace(rng):
    return "".join(rng.choice([" ", "  ", "\t", "\n", "\r\n", "    ", "\n\n"]) for _ in range(rng.randint(1, 30)))


def mixed_text(rng, parts):
    gens = [lambda: prose(rng, rng.randint(1, 4)), lambda: chinese(rng, rng.randint(3, 20)), lambda: code(rng),
            lambda: " ".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 6))), lambda: whitespace(rng),
            lambda: rng.choice(OTHER)]
    return "".join(rng.choice(gens)() + rng.choice([" ", "\n", "", "  "]) for _ in range(parts))


def corpus(seed, lines):
    rng = random.Random(seed)
    return [mixed_text(rng, rng.randint(2, 8)) for _ in range(lines)]


EDGE_TEXTS = [
    "", " ", "  ", "\n", "\t", "a", "Hello world", " Hello world", "Hello  world   ", "I'M HERE. They'RE 'S 'ſ",
    "don't stop believin'", "1234567890 12 123 1234", "3.14159 + 2.71828 = 5.85987", "x" * 300,
    " " * 257 + "end", "\n" * 40 + "x", "\t\t\t\n\n  \n", "a\r\nb\rc\nd", "trailing spaces   ",
    "<|im_start|>user\nhi<|im_end|>\n", "<|im_start|><|im_end|><|endoftext|>", "<|im_sta", "x<|im_end|>y",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", "<think>\nhmm\n</think>\n\nok",
    "<tool_call>{\"a\": 1}</tool_call>", "hello world", "say hello world now", "hello worldwide", "a  <mask> b",
    "<mask>", "   <mask>", "Ωmega Ωmega", "\u2126mega",
    "e\u0301e\u0301 o\u0308\u0323 \u1e9b\u0323 a\u0328\u0301", "\u1100\u1161\u11a8\u1100\u1161", "\uac00\u11a8",
    "\uf900\uf9ff\U0002f800", "\u212b \u2126 \u1e9b", "\u0958\u0959 \u0344 \u0f73",
    "\u180e\u200b\u2060\ufeff", "\u00a0\u1680\u2000\u2001\u2028\u2029\u202f\u205f\u3000", "\x00\x01\x1b[0m\x7f",
    "\x1c\x1d\x1e\x1f\x85", "\ufffd\ufffe\uffff", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
    "\U0001f44d\U0001f3fd\U0001f44d\U0001f3ff", "\U0001f1ef\U0001f1f5\U0001f1e9\U0001f1ea", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "مرحبا \u200fبالعالم\u200e 123", "‏שלום‎ world", "\U0010ffff\U000e0001", "ǅungla ǈ", "İstanbul ıi",
    "ÀÁÂÃÄÅ àáâãäå", "ＡＢＣ１２３！", "ﬁnance ﬂow", "全角\u3000スペース", "😀" * 50, "👍🏽" * 20 + " ok",
]


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=True, indent=None, separators=(",", ":"))


def train_tokenizer(kind, lines):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama")))
    if kind == "qwen":
        tok.normalizer = normalizers.NFC()
    pattern = {"qwen": QWEN_PATTERN, "llama": LLAMA3_PATTERN}.get(kind)
    if pattern:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer)
    return tok


def finish_tokenizer(kind, tok):
    """Added tokens, post-processor and JSON shapes as the real models ship them."""
    from tokenizers import AddedToken, Tokenizer, processors
    if kind == "qwen":
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                for t in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
        tok.add_tokens([AddedToken(t, special=False, normalized=False)
                        for t in ["<tool_call>", "</tool_call>", "<think>", "</think>"]])
        tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    elif kind == "llama":
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                    "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
    else:
        tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False),
                                AddedToken("<mask>", special=True, lstrip=True, rstrip=False, normalized=False)])
        tok.add_tokens([AddedToken("hello world", single_word=True, normalized=True),
                        AddedToken("\u2126mega", normalized=True), AddedToken(" <sep> ", rstrip=True, normalized=False)])
    data = json.loads(tok.to_str())
    model = data["model"]
    if kind == "llama":
        # Whole words in the vocabulary that the merges do not build: ignore_merges emits them.
        base = len(model["vocab"])
        extra = ["Ġunmergeable", "Ġhello", "ĠThe", "æĪĳä»¬", "ĠĠĠĠ"]
        shift = {}
        for t in extra:
            if t not in model["vocab"]:
                shift[t] = len(shift)
        for t, i in shift.items():
            model["vocab"][t] = base + i
        for a in data["added_tokens"]:
            a["id"] += len(shift)
        for p in data["post_processor"]["processors"]:
            if p["type"] == "TemplateProcessing":
                for st in p["special_tokens"].values():
                    st["ids"] = [i + len(shift) for i in st["ids"]]
    if kind == "gpt2_prefix":
        data["pre_tokenizer"]["add_prefix_space"] = True
    return Tokenizer.from_str(json.dumps(data))


def legacy_merges(path):
    """Rewrite merges in the older "a b" string form (GPT-2 era files) that loaders still accept."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in data["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=2)


CONFIGS = {
    # name: (tokenizer kind, tokenizer_class, template name, template, bos, eos, pad)
    "qwen2_5": ("qwen", "Qwen2Tokenizer", "qwen2_5", QWEN25_TEMPLATE, None, "<|im_end|>", "<|endoftext|>"),
    "qwen3": ("qwen", "Qwen2Tokenizer", "qwen3", QWEN3_TEMPLATE, None, "<|im_end|>", "<|endoftext|>"),
    "llama3_1": ("llama", "PreTrainedTokenizerFast", "llama3_1", LLAMA31_TEMPLATE, "<|begin_of_text|>",
                 "<|eot_id|>", None),
    "llama3": ("llama", "PreTrainedTokenizerFast", "llama3", LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>",
               None),
    "gpt2": ("gpt2", "PreTrainedTokenizerFast", None, None, "<|endoftext|>", "<|endoftext|>", None),
    "gpt2_prefix": ("gpt2_prefix", "PreTrainedTokenizerFast", None, None, "<|endoftext|>", "<|endoftext|>", None),
}


def conversations(rng):
    S, U, A = "system", "user", "assistant"
    convs = [
        ([{"role": U, "content": "Hello!"}], True),
        ([{"role": S, "content": "You are terse."}, {"role": U, "content": "2+2?"}, {"role": A, "content": "4"}],
         False),
        ([{"role": U, "content": "Write a haiku about tokens."},
          {"role": A, "content": "Bytes merge into words,\nranks decide the order,\nids flow to the GPU."}], False),
        ([{"role": S, "content": "  Spaced system.\n"}, {"role": U, "content": "\n\nleading newlines"},
          {"role": A, "content": "\n  indented answer  \n"}, {"role": U, "content": "again 再来一次 😀"},
          {"role": A, "content": "好的！👍🏽 done."}], False),
        ([{"role": U, "content": "think first"},
          {"role": A, "content": "<think>\nstep one\nstep two\n</think>\n\nThe answer is 42."}], False),
        ([{"role": U, "content": "q1"}, {"role": A, "content": "<think>old reasoning</think>a1"},
          {"role": U, "content": "q2"}, {"role": A, "content": "a2"}], False),
        ([{"role": U, "content": "q1"}, {"role": A, "content": "a1"}, {"role": U, "content": "q2"}], True),
        ([{"role": U, "content": "empty answer"}, {"role": A, "content": ""}], False),
        ([{"role": S, "content": "sys"}, {"role": U, "content": "u"}, {"role": S, "content": "mid system"},
          {"role": A, "content": "ok"}], False),
        ([{"role": U, "content": "special <|im_end|> and <|eot_id|> inside"},
          {"role": A, "content": "code:\n```python\ndef f():\n\treturn 1\n```"}], False),
        ([{"role": U, "content": "e\u0301 \uf900 \u212b"}, {"role": A, "content": "\u1100\u1161 ok "}], False),
        ([{"role": U, "content": "\u3000\x1c only odd space \u2003"}, {"role": A, "content": " \t\u3000\n"},
          {"role": U, "content": "👍🏽"}, {"role": A, "content": "\n\n👨‍👩‍👧 first"}], False),
    ]
    for _ in range(6):
        msgs = []
        if rng.random() < 0.5:
            msgs.append({"role": S, "content": mixed_text(rng, 1)})
        for _ in range(rng.randint(1, 3)):
            msgs.append({"role": U, "content": mixed_text(rng, rng.randint(1, 3))})
            msgs.append({"role": A, "content": mixed_text(rng, rng.randint(1, 3))})
        convs.append((msgs, False))
    return convs


def mask_to_spans(mask):
    spans, start = [], None
    for i, m in enumerate(list(mask) + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append([start, i])
            start = None
    return spans


def held_out_texts():
    rng = random.Random(987654)  # another seed than the training corpus
    texts = EDGE_TEXTS + [mixed_text(rng, rng.randint(1, 10)) for _ in range(150)]
    texts.append(mixed_text(rng, 1000))  # one long document
    return texts


def model_cases(name, d, ref, hf, texts):
    """Expected ids and decodes of `texts` by the tokenizer.json in `d` (the oracle)."""
    cases = []
    for text in texts:
        ids = ref.encode(text, add_special_tokens=False).ids
        assert hf.encode(text, add_special_tokens=False) == ids, f"transformers and tokenizers differ: {name}"
        cases.append({"text": text, "ids": ids, "ids_special": ref.encode(text, add_special_tokens=True).ids,
                      "decode": ref.decode(ids, skip_special_tokens=False),
                      "decode_skip": ref.decode(ids, skip_special_tokens=True)})
    drng = random.Random(len(name))  # arbitrary id sequences, cutting through characters
    decodes = []
    for _ in range(40):
        ids = [drng.randrange(ref.get_vocab_size(with_added_tokens=True)) for _ in range(drng.randint(1, 12))]
        decodes.append({"ids": ids, "decode": ref.decode(ids, skip_special_tokens=False),
                        "decode_skip": ref.decode(ids, skip_special_tokens=True)})
    return {"dir": os.path.basename(d), "vocab_size": ref.get_vocab_size(with_added_tokens=True),
            "encode": cases, "decode": decodes}


def chat_cases(name, tmpl_name, ref, hf, marked):
    """apply_chat_template text, ids and (with a {% generation %} copy of the template) the
    assistant masks, for the conversations above."""
    out = []
    for msgs, gen in conversations(random.Random(42)):
        for kwargs in ([{}, {"enable_thinking": False}] if tmpl_name == "qwen3" and gen else [{}]):
            text = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen, **kwargs)
            ids = list(hf.apply_chat_template(msgs, tokenize=True, add_generation_prompt=gen,
                                              return_dict=True, **kwargs)["input_ids"])
            assert ids == ref.encode(text, add_special_tokens=False).ids
            case = {"model": name, "template": tmpl_name, "messages": msgs, "add_generation_prompt": gen,
                    "kwargs": kwargs, "text": text, "ids": ids}
            if marked:
                mtext = hf.apply_chat_template(msgs, chat_template=marked, tokenize=False,
                                               add_generation_prompt=gen, **kwargs)
                assert mtext == text, f"marked template differs for {tmpl_name}:\n{mtext!r}\n{text!r}"
                out_m = hf.apply_chat_template(msgs, chat_template=marked, tokenize=True,
                                               add_generation_prompt=gen, return_dict=True,
                                               return_assistant_tokens_mask=True, **kwargs)
                assert list(out_m["input_ids"]) == ids
                case["assistant_spans"] = mask_to_spans(out_m["assistant_masks"])
            out.append(case)
    return out


def versions():
    import tokenizers
    import transformers
    return {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__}


def make_fixtures(out):
    from tokenizers import Tokenizer, normalizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    os.makedirs(out, exist_ok=True)
    train_lines = corpus(1234, 4000)
    trained = {kind: train_tokenizer(kind.split("_")[0], train_lines) for kind in ["qwen", "llama", "gpt2"]}
    finished = {k: finish_tokenizer(k, Tokenizer.from_str(trained[k.split("_")[0]].to_str()))
                for k in ["qwen", "llama", "gpt2", "gpt2_prefix"]}
    texts = held_out_texts()
    expected = {"versions": versions(), "models": {}, "chat": [], "nfc": []}
    marked = marked_templates()
    for name, (kind, cls, tmpl_name, tmpl, bos, eos, pad) in CONFIGS.items():
        d = os.path.join(out, name)
        shutil.rmtree(d, ignore_errors=True)
        fast = PreTrainedTokenizerFast(tokenizer_object=finished[kind], bos_token=bos, eos_token=eos,
                                       pad_token=pad)
        if tmpl:
            fast.chat_template = tmpl
        fast.save_pretrained(d)
        cfg_path = os.path.join(d, "tokenizer_config.json")
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
        cfg["tokenizer_class"] = cls
        with open(cfg_path, "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False, indent=2)
        if kind.startswith("gpt2"):
            legacy_merges(os.path.join(d, "tokenizer.json"))
        ref = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))  # the oracle: what the directory holds
        hf = AutoTokenizer.from_pretrained(d)
        expected["models"][name] = model_cases(name, d, ref, hf, texts)
        if tmpl:
            expected["chat"] += chat_cases(name, tmpl_name, ref, hf, marked[tmpl_name])
    nfc = normalizers.NFC()
    for s in nfc_cases():
        expected["nfc"].append([s, nfc.normalize_str(s)])
    write_json(os.path.join(out, "expected.json"), expected)
    n_enc = sum(len(m["encode"]) for m in expected["models"].values())
    print(f"wrote {out}: {len(expected['models'])} tokenizers, {n_enc} encode cases, "
          f"{len(expected['chat'])} conversations, {len(expected['nfc'])} NFC cases")


def real_model(model_dir, out):
    """Expected ids (and chat texts/ids when its template is one of the above) for a real
    model directory, for tst_tokenizer's realModel test."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    os.makedirs(out, exist_ok=True)
    ref = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(model_dir)
    expected = {"versions": versions(), "models": {"real": model_cases("real", model_dir, ref, hf, held_out_texts())},
                "chat": [], "nfc": []}
    expected["models"]["real"]["dir"] = os.path.abspath(model_dir)
    tmpl = hf.chat_template or ""
    known = {"qwen2_5": QWEN25_TEMPLATE, "qwen3": QWEN3_TEMPLATE, "llama3_1": LLAMA31_TEMPLATE,
             "llama3": LLAMA3_TEMPLATE}
    for tmpl_name, t in known.items():
        if tmpl.strip() == t.strip():
            expected["chat"] = chat_cases("real", tmpl_name, ref, hf, marked_templates()[tmpl_name])
    write_json(os.path.join(out, "expected.json"), expected)
    print(f"wrote {out}: {len(expected['models']['real']['encode'])} encode cases, {len(expected['chat'])} conversations")


# ---- NFC tables, derived from the oracle's own normalizer -----------------------------------
def all_code_points():
    return [c for c in range(0x110000)
            if c != 0x0A and not 0xD800 <= c <= 0xDFFF and not 0xAC00 <= c <= 0xD7A3]  # \n separates


def bulk(norm, strings):
    out = norm.normalize_str("\n".join(strings)).split("\n")
    assert len(out) == len(strings)
    return out


def nfc_data():
    """Decompositions, combining classes and composition pairs as HF tokenizers' NFC applies
    them (its Unicode version, which may be older than Python's)."""
    from tokenizers import normalizers
    NFD, NFC = normalizers.NFD(), normalizers.NFC()
    cps = all_code_points()
    chars = [chr(c) for c in cps]
    nfd = dict(zip(cps, bulk(NFD, chars)))
    nfc = dict(zip(cps, bulk(NFC, chars)))
    hi, lo = "\u0345", "\u0334"  # ccc 240 and 1
    plain = [c for c in cps if nfd[c] == chr(c)]
    p1 = bulk(NFD, [hi + chr(c) for c in plain])
    p2 = bulk(NFD, [chr(c) + lo for c in plain])
    nonstarters = [c for c, a, b in zip(plain, p1, p2) if a != hi + chr(c) or b != chr(c) + lo]
    ccc = {}
    refs = {}
    for c in nonstarters:
        p = unicodedata.combining(chr(c))
        assert p != 0, f"U+{c:04X}: a non-starter for HF, class 0 for Python"
        refs.setdefault(p, c)
        ccc[c] = p
    for c, p in ccc.items():  # same class as the reference of its Python class, for HF
        r = chr(refs[p])
        assert NFD.normalize_str(r + chr(c)) == r + chr(c) and NFD.normalize_str(chr(c) + r) == chr(c) + r, hex(c)
    order = sorted(refs)
    for a, b in zip(order, order[1:]):
        assert NFD.normalize_str(chr(refs[b]) + chr(refs[a])) == chr(refs[a]) + chr(refs[b])
    pairs, unstable = {}, {}
    for c in cps:
        d = nfd[c]
        if d == chr(c):
            continue
        if nfc[c] != chr(c):
            unstable[c] = [ord(x) for x in d]
            continue
        found = None
        for i in range(len(d) - 1, 0, -1):
            first = NFC.normalize_str(d[:i] + d[i + 1:])
            if len(first) == 1 and NFC.normalize_str(first + d[i]) == chr(c):
                found = (ord(first), ord(d[i]))
                break
        assert found, f"no composition pair for U+{c:04X}"
        pairs[found] = c
    decomp_of = {c: ab for ab, c in pairs.items()}

    def full(c):
        if c in decomp_of:
            return full(decomp_of[c][0]) + full(decomp_of[c][1])
        return unstable.get(c, [c])
    for c in decomp_of:
        assert "".join(map(chr, full(c))) == nfd[c], hex(c)
    return ccc, pairs, unstable


def nfc_cases():
    """Strings that exercise NFC (picked with Python's Unicode data; HF's NFC gives the answers)."""
    marks, firsts, seconds, composites, unstable = [], set(), set(), [], []
    for c in range(0x110000):
        ch = chr(c)
        if 0xD800 <= c <= 0xDFFF or 0xAC00 <= c <= 0xD7A3:
            continue
        if unicodedata.combining(ch):
            marks.append(c)
        d = unicodedata.decomposition(ch)
        if not d or d.startswith("<"):
            continue
        if unicodedata.normalize("NFC", ch) != ch:
            unstable.append(c)
        elif len(d.split()) == 2:
            a, b = (int(x, 16) for x in d.split())
            firsts.add(a)
            seconds.add(b)
            composites.append(c)
    rng = random.Random(5)
    firsts, seconds = sorted(firsts), sorted(seconds)
    cases = ["", "abc", "".join(map(chr, unstable)), "".join(map(chr, composites)),
             "".join(chr(c) + "\u0323\u0301" for c in composites[:400]),
             "\u1100\u1161", "\u1100\u1161\u11a8", "\uac00\u11a8", "\uac01\u11a8", "\u1100\u1100\u1161\u1161",
             "\u1112\u1175\u11c2\u11a7", "\ud7a3\u11a8"]
    for _ in range(400):
        s = []
        for _ in range(rng.randint(1, 8)):
            s.append(chr(rng.choice(firsts + [0x61, 0x4E00, 0x1100, 0xAC00, 0x20])))
            for _ in range(rng.randint(0, 4)):
                s.append(chr(rng.choice(marks + seconds + [0x1161, 0x11A8])))
        cases.append("".join(s))
    return cases


def write_nfc_tables(path):
    ccc, pairs, unstable = nfc_data()
    import tokenizers

    def rows(values, per_line, decimal_every=0):
        vals = [str(v) if decimal_every and i % decimal_every == decimal_every - 1 else f"0x{v:X}"
                for i, v in enumerate(values)]
        return "\n".join("    " + ", ".join(vals[i:i + per_line]) + "," for i in range(0, len(vals), per_line))
    ranges = []
    for c in sorted(ccc):
        if ranges and ranges[-1][1] == c - 1 and ranges[-1][2] == ccc[c]:
            ranges[-1][1] = c
        else:
            ranges.append([c, c, ccc[c]])
    flat_ccc = [v for r in ranges for v in r]
    flat_pairs = [v for (a, b), c in sorted(pairs.items()) for v in (a, b, c)]
    flat_dec = []
    for c in sorted(unstable):
        flat_dec += [c, len(unstable[c])] + unstable[c]
    text = f"""// GENERATED by tests/reference/make_tokenizer_fixtures.py --nfc-tables; do not edit.
// Unicode data for NFC exactly as Hugging Face tokenizers {tokenizers.__version__} applies it (derived from
// its own NFD/NFC, so Odyssey matches the oracle's Unicode version, not the newest one).
// clang-format off
#include "tokenizer/unicode_nfc.h"

namespace odyssey::unicode_data {{

// Canonical combining classes: (first, last, class) ranges.
const std::uint32_t kCombiningClass[] = {{
{rows(flat_ccc, 12, 3)}
}};
const std::size_t kCombiningClassSize = sizeof(kCombiningClass) / sizeof(kCombiningClass[0]);

// Primary composites: (first, second, composite), sorted by (first, second).
const std::uint32_t kCompositions[] = {{
{rows(flat_pairs, 12)}
}};
const std::size_t kCompositionsSize = sizeof(kCompositions) / sizeof(kCompositions[0]);

// Characters NFC never keeps (singletons, exclusions, non-starter decompositions):
// (code point, n, n code points of the full canonical decomposition).
const std::uint32_t kUnstableDecompositions[] = {{
{rows(flat_dec, 12)}
}};
const std::size_t kUnstableDecompositionsSize = sizeof(kUnstableDecompositions) / sizeof(kUnstableDecompositions[0]);

}}  // namespace odyssey::unicode_data
"""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {path}: {len(ranges)} class ranges, {len(pairs)} compositions, {len(unstable)} unstable")


def bench(tokenizer_json, docs_json):
    """HF encode throughput, one document at a time on one thread (encode, not encode_batch)."""
    import time
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_json)
    with open(docs_json, encoding="utf-8") as f:
        docs = json.load(f)
    size = sum(len(d.encode("utf-8")) for d in docs)
    t0 = time.perf_counter()
    n = sum(len(tok.encode(d, add_special_tokens=False).ids) for d in docs)
    dt = time.perf_counter() - t0
    print(f"hf tokenizers: {size / 1e6:.2f} MB, {n} tokens, {dt:.3f} s, {size / 1e6 / dt:.2f} MB/s")


if __name__ == "__main__":
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if len(sys.argv) == 3 and sys.argv[1] == "--nfc-tables":
        write_nfc_tables(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "--real":
        real_model(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "--bench":
        bench(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 2 and not sys.argv[1].startswith("-"):
        make_fixtures(sys.argv[1])
    else:
        sys.exit(__doc__)
