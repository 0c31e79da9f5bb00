#include "bench.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

namespace odyssey::bench {

// The run's job as a TrainConfig, for the memory planner.
TrainConfig bench_config(const Options& o, const std::string& mode, std::int64_t seq, int world) {
  TrainConfig c;
  c.tuner_type = mode;
  c.lora_rank = o.lora_r;
  c.lora_alpha = o.lora_alpha;
  c.lora_dropout = o.lora_dropout;
  c.target_modules = o.targets.empty() ? std::vector<std::string>{"all-linear"} : o.targets;
  c.max_length = seq;
  c.per_device_train_batch_size = 1;
  c.torch_dtype = o.dtype;
  c.device = o.device;
  c.fused_kernels = o.fused;
  c.attn_impl = o.attention == "flash" ? "flash_attn" : o.attention == "auto" ? "sdpa" : "cudnn";
  c.activation_checkpointing =
      o.checkpointing == "auto" || o.checkpointing == "all" || o.checkpointing == "none" ? o.checkpointing : "auto";
  c.padding_free = true;
  c.offload_activations = o.offload == "on" ? "true" : o.offload == "off" ? "false" : "auto";
  c.mlp_tile_tokens = o.mlp_tile;
  c.keep_attention = o.keep_attention;
  c.layers_per_checkpoint = o.layers_per_checkpoint;
  c.sequence_parallel_size = world / std::max(1, o.dp);
  c.nproc_per_node = world;
  c.ulysses_size = o.ulysses;
  c.use_galore = o.optimizer == "galore" || o.optimizer == "q-galore";
  c.galore_quantization = o.optimizer == "q-galore";
  c.galore_rank = o.galore_rank;
  if (!o.quant.empty()) {
    c.quant_bits = 4;
    c.bnb_4bit_quant_type = o.quant;
  }
  c.galore_update_proj_gap = o.galore_gap;
  c.zero_stage = o.optimizer == "zero1" ? 1 : o.optimizer.starts_with("zero2") ? 2 : 0;
  c.offload_optimizer = o.optimizer == "zero2-offload";
  // adamw: full fine-tuning in the weights' dtype, as the HF anchor trains; adamw-fp32: fp32
  // master weights, moments and gradients on one process (optimizer_dtype: fp32).
  c.optimizer_dtype = o.optimizer == "adamw-fp32" ? "fp32" : o.optimizer == "adamw" ? "bf16" : "auto";
  return c;
}

// Reads the command line into `o`: -1 when it is good, else the exit code (2: bad arguments).
int parse_options(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "odyssey-bench: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--shape") o.shapes = split(next());
      else if (a == "--seq") {
        o.seqs.clear();
        for (const auto& s : split(next())) o.seqs.push_back(std::stoll(s));
      } else if (a == "--mode") o.modes = split(next());
      else if (a == "--steps") o.steps = std::stoi(next());
      else if (a == "--warmup") o.warmup = std::stoi(next());
      else if (a == "--lora-r") o.lora_r = std::stoll(next());
      else if (a == "--lora-alpha") o.lora_alpha = std::stod(next());
      else if (a == "--lora-dropout") {
        o.lora_dropout = std::stod(next());
        if (!(o.lora_dropout >= 0.0 && o.lora_dropout < 1.0))
          throw std::invalid_argument("--lora-dropout takes a probability in [0, 1)");
      } else if (a == "--checkpointing") o.checkpointing = next();
      else if (a == "--fused") o.fused = next() != "off";
      else if (a == "--offload") {
        o.offload = next();
        if (o.offload != "on" && o.offload != "off" && o.offload != "auto")
          throw std::invalid_argument("--offload takes on, off or auto, found " + o.offload);
      } else if (a == "--attention") o.attention = next();
      else if (a == "--label") o.label = next();
      else if (a == "--device") o.device = next();
      else if (a == "--dtype") o.dtype = next();
      else if (a == "--layers") o.layers = std::stoll(next());
      else if (a == "--vocab-override") o.vocab_override = std::stoll(next());
      else if (a == "--out") o.out = next();
      else if (a == "--check") {
        std::cerr << "odyssey-bench: --check moved to the tests: tests/gpu/step_checks.cpp (ctest step_checks_cpu and, "
                     "label gpu, step_checks_gpu; build-gpu/tests/gpu/step_checks --shape S on a GPU machine)\n";
        return 2;
      } else if (a == "--ulysses") o.ulysses = std::stoi(next());
      else if (a == "--dp") o.dp = std::stoi(next());
      else if (a == "--keep-attention") o.keep_attention = next();
      else if (a == "--layers-per-checkpoint") {
        const std::string v = next();
        o.layers_per_checkpoint = v == "auto" ? 0 : std::stoll(v);
        if (o.layers_per_checkpoint < 0) throw std::invalid_argument(a);
      } else if (a == "--mlp-recompute") {
        o.mlp_recompute = next();
        if (o.mlp_recompute != "auto") (void)std::stoll(o.mlp_recompute);  // "not a number" below
      } else if (a == "--mlp-offload") {
        o.mlp_offload = next();
        if (o.mlp_offload != "auto") (void)std::stoll(o.mlp_offload);
      } else if (a == "--mlp-park") {
        o.mlp_park = next();
        if (o.mlp_park != "auto") (void)std::stoll(o.mlp_park);
      } else if (a == "--mlp-park-stride") {
        o.mlp_park_stride = std::stoll(next());
      } else if (a == "--mlp-tile") {
        const std::string v = next();
        o.mlp_tile = v == "auto" ? 0 : std::stoll(v);
      } else if (a == "--optimizer") {
        o.optimizer = next();
        static const std::set<std::string> known{"adamw", "adamw-fp32", "galore",       "q-galore",
                                                 "zero1", "zero2",      "zero2-offload"};
        if (!known.contains(o.optimizer)) {
          std::cerr << "odyssey-bench: --optimizer " << o.optimizer
                    << ": expected adamw, adamw-fp32, galore, q-galore, zero1, zero2 or zero2-offload\n";
          return 2;
        }
      } else if (a == "--galore-rank") o.galore_rank = std::stoll(next());
      else if (a == "--galore-gap") o.galore_gap = std::stoll(next());
      else if (a == "--memory-gib") o.memory_gib = std::stod(next());
      else if (a == "--rerun-mlp") {
        o.rerun_mlp = next();
        if (o.rerun_mlp != "skip" && o.rerun_mlp != "full")
          throw std::invalid_argument("--rerun-mlp takes skip or full");
      } else if (a == "--cudnn-gqa") {
        o.cudnn_gqa = next();
        if (o.cudnn_gqa != "on" && o.cudnn_gqa != "off") throw std::invalid_argument("--cudnn-gqa takes on or off");
      } else if (a == "--band-attention") {
        o.band_attention = next();
        if (o.band_attention != "on" && o.band_attention != "off")
          throw std::invalid_argument("--band-attention takes on or off");
      } else if (a == "--band-backward") {
        o.band_backward = next();
        if (o.band_backward != "windowed" && o.band_backward != "all")
          throw std::invalid_argument("--band-backward takes windowed or all");
      } else if (a == "--cudnn-softcap") {
        o.cudnn_softcap = next();
        if (o.cudnn_softcap != "on" && o.cudnn_softcap != "off" && o.cudnn_softcap != "global")
          throw std::invalid_argument("--cudnn-softcap takes on, off or global");
      } else if (a == "--band-tanh") {
        o.band_tanh = next();
        if (o.band_tanh != "approx" && o.band_tanh != "exact")
          throw std::invalid_argument("--band-tanh takes approx or exact");
      } else if (a == "--kept-margin") {
        o.kept_margin = std::stod(next());
        if (!(o.kept_margin >= 0 && o.kept_margin <= 0.5))
          throw std::invalid_argument("--kept-margin takes a share of the capacity from 0 to 0.5");
      } else if (a == "--quant") {
        o.quant = next();
        if (o.quant != "nf4" && o.quant != "fp4") throw std::invalid_argument("--quant takes nf4 or fp4");
      } else if (a == "--targets") {
        o.targets = split(next());
      } else if (a == "--profile") o.profile = next();
      else if (a == "--frontier") {
        o.frontier = std::stoi(next());
        if (o.frontier < 1) throw std::invalid_argument("--frontier");
      } else if (a == "--frontier-at") {
        for (const auto& g : split(next())) o.frontier_at.push_back(std::stod(g));
      } else if (a == "--a2a-bytes") {
        for (const auto& b : split(next())) o.a2a_bytes.push_back(std::stoll(b));
      } else {
        std::cerr << "odyssey-bench: unknown argument " << a
                  << " (see the comment at the top of app/odyssey_bench/main.cpp)\n";
        return 2;
      }
    } catch (const std::exception&) {
      std::cerr << "odyssey-bench: " << a << ": not a number\n";
      return 2;
    }
  }
  const bool count = !o.checkpointing.empty() && std::all_of(o.checkpointing.begin(), o.checkpointing.end(),
                                                             [](char ch) { return ch >= '0' && ch <= '9'; });
  if (o.checkpointing != "all" && o.checkpointing != "none" && o.checkpointing != "auto" && !count) {
    std::cerr << "odyssey-bench: --checkpointing: expected all, none, auto or a number of layers\n";
    return 2;
  }
  for (const auto& [flag, v] : {std::pair<const char*, const std::string&>{"--mlp-recompute", o.mlp_recompute},
                                std::pair<const char*, const std::string&>{"--mlp-offload", o.mlp_offload},
                                std::pair<const char*, const std::string&>{"--mlp-park", o.mlp_park}})
    if (v != "auto" &&
        (v.empty() || !std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))) {
      std::cerr << "odyssey-bench: " << flag << ": expected auto or a number of layers\n";
      return 2;
    }
  if (o.mlp_park_stride < 1) {
    std::cerr << "odyssey-bench: --mlp-park-stride: expected a number of layers, 1 or more\n";
    return 2;
  }
  if (o.mlp_park_stride > 1 && (o.mlp_park == "auto" || o.mlp_park == "0")) {
    std::cerr << "odyssey-bench: --mlp-park-stride applies to a fixed count: give --mlp-park N (auto takes the "
                 "planner's stride)\n";
    return 2;
  }
  if (o.attention != "cudnn" && o.attention != "flash" && o.attention != "auto") {
    std::cerr << "odyssey-bench: --attention: expected cudnn, flash or auto\n";
    return 2;
  }
  if (!o.quant.empty() &&
      std::any_of(o.modes.begin(), o.modes.end(), [](const std::string& m) { return m != "lora"; })) {
    std::cerr << "odyssey-bench: --quant needs --mode lora (a 4-bit base is frozen)\n";
    return 2;
  }
  return -1;
}

}  // namespace odyssey::bench
