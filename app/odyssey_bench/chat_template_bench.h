// odyssey-bench --chat-template DATA.jsonl --tokenizer TOKENIZER_JSON [--template-file T.jinja |
// --template NAME] [--threads N] [--out FILE]: read, render and tokenize a dataset file as a run
// does, and print one JSON line with the time taken and the digest of the ids
// (tests/bench/chat_template_bench.py is the transformers side; docs/tokenizer.md).
#pragma once

namespace odyssey::bench {

// argv as odyssey-bench's main received it, the first option being --chat-template. Returns the
// exit status; a bad option throws std::invalid_argument.
int chat_template_bench(int argc, char** argv);

}  // namespace odyssey::bench
