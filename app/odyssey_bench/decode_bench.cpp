// odyssey-bench --decode: generation speed of a shape with random weights (docs/benchmarks.md,
// "Generation"; docs/inference.md, "Speed"), without writing the model to disk:
//
//   odyssey-bench --decode --shape qwen2.5-7b [--batch 1,16] [--prompt-len 1024] [--new-tokens 256]
//                 [--repeat 2] [--pack on|off] [--decode-kernel off|on] [--graph on|off]
//                 [--profile FILE] [--layers K] [--device cuda|cpu] [--dtype bfloat16|float32]
//                 [--label NAME] [--out FILE]
//
// For each batch size: random prompt ids of --prompt-len tokens, greedy, end-of-sequence
// ignored, --new-tokens new tokens through model::generate (the engine's own loop: prefill, then
// the static decode step, on CUDA a CUDA graph); one warm-up run, then --repeat timed runs, the
// best kept. decode_tokens_per_s = batch x (new - 1) / (time of the last token - time of the
// first), time_to_first_token_s as generate() reports it. --pack off skips
// CausalLMImpl::pack_projections (q/k/v and gate/up as separate products), --decode-kernel on
// attends through kernels::decode_attention instead of SDPA (the engine's default is off until
// the kernel is checked on a GPU), --graph off launches every step's
// kernels one by one: the A/B switches of what makes a step fast. --profile FILE runs one more
// generation of 16 new tokens under the Kineto profiler (profile.cpp's lines; with --graph off the
// per-kernel list is the steps' own).
// tests/bench/generate_bench.py times transformers' generate on the same shape beside
// `odyssey-train generate`, for the ratio against the anchor.
#include "decode_bench.h"

#include <ATen/DeviceAccelerator.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <string>

#include "bench.h"
#include "common/json_dump.h"
#include "model/generate.h"
#include "provenance.h"

namespace odyssey::bench {

int decode_bench(int argc, char** argv) {
  std::string shape = "qwen2.5-7b", device_name = "cuda", dtype_name = "bfloat16", label, out, profile;
  std::vector<std::int64_t> batches{1, 16};
  std::int64_t prompt_len = 1024, new_tokens = 256, layers = 0;
  int repeat = 2;
  bool pack = true, kernel = false, graph = true;
  auto on_off = [](const std::string& flag, const std::string& v) {
    if (v != "on" && v != "off") throw std::invalid_argument(flag + " takes on or off, found " + v);
    return v == "on";
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--decode") continue;
    if (a == "--shape") shape = next();
    else if (a == "--batch") {
      batches.clear();
      for (const auto& b : split(next())) batches.push_back(std::stoll(b));
    } else if (a == "--prompt-len") prompt_len = std::stoll(next());
    else if (a == "--new-tokens") new_tokens = std::stoll(next());
    else if (a == "--repeat") repeat = std::stoi(next());
    else if (a == "--pack") pack = on_off(a, next());
    else if (a == "--decode-kernel") kernel = on_off(a, next());
    else if (a == "--graph") graph = on_off(a, next());
    else if (a == "--profile") profile = next();
    else if (a == "--layers") layers = std::stoll(next());
    else if (a == "--device") device_name = next();
    else if (a == "--dtype") dtype_name = next();
    else if (a == "--label") label = next();
    else if (a == "--out") out = next();
    else throw std::invalid_argument("unknown argument " + a + " (see app/odyssey_bench/decode_bench.cpp)");
  }
  if (prompt_len < 1 || new_tokens < 2 || repeat < 1 || batches.empty())
    throw std::invalid_argument("--prompt-len >= 1, --new-tokens >= 2, --repeat >= 1 and a --batch are needed");
  if (device_name == "cuda" && !torch::cuda::is_available()) {
    std::cerr << "odyssey-bench --decode: no CUDA device is visible (use --device cpu for a smoke test)\n";
    return 77;
  }
  const torch::Device device = device_name == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const std::string file = shape_file(shape);
  if (file.empty()) throw std::invalid_argument("--shape " + shape + ": no such file in resources/model-shapes");
  const std::string text = read_file(file);
  auto dc = parse_decoder_config(text, file);
  if (!dc.ok()) {
    std::cerr << format_all(dc.diagnostics);
    return 2;
  }
  if (layers > 0) dc.value.hf.num_hidden_layers = layers;

  model::DecoderOptions mo;
  mo.device = device;
  mo.dtype = dtype_name == "float32" ? torch::kFloat32 : torch::kBFloat16;
  mo.fused_kernels = device.is_cuda();  // as an inference session sets it (core/infer/session.cpp)
  torch::manual_seed(0);
  model::CausalLM lm(dc.value, mo);
  lm->initialize_random();
  lm->eval();
  const std::int64_t packed = pack ? lm->pack_projections() : 0;
  lm->set_decode_kernel(kernel);

  const Provenance prov = machine_provenance(device);
  std::ofstream sink;
  if (!out.empty()) sink.open(out, std::ios::app);
  for (const std::int64_t batch : batches) {
    torch::manual_seed(1);
    const torch::Tensor ids = torch::randint(dc.value.hf.vocab_size, {batch, prompt_len}, torch::kInt64);
    std::vector<std::vector<std::int32_t>> prompts(static_cast<std::size_t>(batch));
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t j = 0; j < prompt_len; ++j)
        prompts[static_cast<std::size_t>(b)].push_back(static_cast<std::int32_t>(ids[b][j].item<std::int64_t>()));
    model::GenerationOptions g;
    g.max_new_tokens = new_tokens;
    g.ignore_eos = true;
    g.cuda_graph = graph;
    nlohmann::ordered_json rec;
    rec["impl"] = "odyssey";
    rec["bench"] = "decode";
    rec["shape"] = shape;
    if (!label.empty()) rec["label"] = label;
    add_provenance(rec, prov);
    rec["dtype"] = dtype_name;
    rec["batch"] = batch;
    rec["prompt_len"] = prompt_len;
    rec["new_tokens"] = new_tokens;
    rec["layers"] = dc.value.hf.num_hidden_layers;
    rec["packed_groups"] = packed;
    rec["decode_kernel"] = kernel;
    rec["cuda_graph"] = graph && device.is_cuda();
    double best_decode = 0, best_ttft = 0;
    if (device.is_cuda()) at::accelerator::resetPeakStats(device.index());
    for (int r = 0; r <= repeat; ++r) {
      auto res = model::generate(lm, prompts, g, nullptr, {}, nullptr);
      if (!res.ok()) {
        std::cerr << format_all(res.diagnostics);
        return 2;
      }
      const model::GenerationResult& first = res.value.front();
      const double span = first.seconds - first.first_token_seconds;
      const double tps = static_cast<double>(batch) * static_cast<double>(first.ids.size() - 1) / span;
      if (r == 0) continue;  // warm-up: the graph's capture, cuBLAS's choices
      if (tps > best_decode) best_decode = tps;
      if (best_ttft == 0 || first.first_token_seconds < best_ttft) best_ttft = first.first_token_seconds;
    }
    rec["decode_tokens_per_s"] = sig(best_decode, 5);
    rec["ms_per_step"] = sig(static_cast<double>(batch) / best_decode * 1e3, 5);
    rec["time_to_first_token_s"] = sig(best_ttft, 4);
    rec["attention_backend_ran"] = lm->attention_backend_ran();
    if (device.is_cuda())
      rec["peak_gib"] =
          sig(static_cast<double>(at::accelerator::getDeviceStats(device.index()).allocated_bytes[0].peak) /
                  double(1 << 30),
              4);
    std::cout << dump_json(rec) << '\n' << std::flush;
    if (sink) sink << dump_json(rec) << '\n' << std::flush;
    if (!profile.empty()) {
      model::GenerationOptions p = g;
      p.max_new_tokens = 16;
      nlohmann::ordered_json head = rec;
      head["label"] = (label.empty() ? std::string("decode") : label) + " b" + std::to_string(batch) + " x16";
      profile_step(profile, head, true, [&] { (void)model::generate(lm, prompts, p, nullptr, {}, nullptr); });
    }
  }
  return 0;
}

}  // namespace odyssey::bench
