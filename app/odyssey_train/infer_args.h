// What `generate` and `chat` share on the command line: the model options and the sampling
// flags (docs/cli.md), turned into an inference session's and a generation's options.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_args.h"
#ifdef ODYSSEY_HAVE_TORCH
#include "infer/session.h"
#include "model/generate.h"
#endif

namespace odyssey::cli {

// The options both commands take (model, adapter, device, dtype, template, sampling flags).
std::vector<OptionSpec> inference_options();

#ifdef ODYSSEY_HAVE_TORCH
infer::SessionOptions session_options(const Args& a);
// The sampling flags over `o` (the session's defaults). A bad value is a usage error printed
// with the command's name; returns false then.
bool apply_sampling_flags(const Args& a, const std::string& command, model::GenerationOptions* o);
// --enable-thinking true|false (absent: the template's default). False with a message on a bad value.
bool thinking_flag(const Args& a, const std::string& command, std::optional<bool>* out);
// A generation's fields as both commands print them, appended to `j` in this order: text, ids,
// finish_reason, stop (when met), prompt_tokens, new_tokens, tokens_per_s, time_to_first_token_s,
// seconds (docs/inference.md).
void append_result(nlohmann::ordered_json& j, const model::GenerationResult& g);
#endif

}  // namespace odyssey::cli
