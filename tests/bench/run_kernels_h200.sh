#!/usr/bin/env bash
# The kernels issue's benchmark of docs/benchmarks.md on one H200 (device kind nvidia-h200):
#   build     the engine with its CUDA kernels (docs/building.md, GPU server)
#   selftest  odyssey-train selftest (every kernel against its reference), before any bench
#   odyssey-7b, odyssey-05b
#             odyssey-bench: the fast mode (fused kernels, cuDNN attention, the planner's
#             checkpointing) and the lean mode (every layer checkpointed, inputs offloaded)
#   hf        tests/bench/hf_bench.py, transformers + PEFT on the same shapes
#   hf-32k    the same at 32K only (7B LoRA, 0.5B full): the rows the goals name
#   budget-05b
#             0.5B full at 32K under memory budgets (BUDGETS GiB, default 24 25 26), the
#             planner choosing checkpointed layers, kept attention and MLP recomputation
#   profile-05b
#             0.5B full at 32K, fast, one more step under the profiler (profile.jsonl)
#   long      7B LoRA, one step at 128K/256K/512K tokens (LONG_SEQS) in the lean mode (tiled MLP
#             and kept attention as the planner chooses: auto)
#   kept      7B LoRA 128K lean, one step with every attention recomputed and one with kept
#             attention outputs (keep_attention none vs auto)
#   compare   tests/bench/compare.py over everything in $OUT (COMPARE_ARGS: e.g. --allow-mixed-leases)
#   headline  docs/benchmarks.md's headline rows in one lease, an estimated 5 minutes after `build`:
#             odyssey-bench fast and lean for 7B LoRA 32K and 0.5B full 32K (+ 0.5B "offload
#             budget 23 GiB"), hf_bench.py on the same shapes with checkpointing on and off
#             (Trainer step: outputs released; an OOM is a line), the held-output step of the
#             earlier rows with checkpointing on (HEADLINE_HELD=0 skips it), then compare.py on
#             these lines only (headline-{odyssey,hf}.jsonl, headline-compare.md)
#   parity    the correctness of what the other phases time: fused_parity_gpu (the fused bf16 path
#             with every memory tier against transformers bf16 / fp32: Qwen2.5-0.5B full, 1.5B and
#             7B LoRA, per-token loss and 20-step curves; about 5 minutes) and model_parity_gpu parity
#             (the unfused path's logits and gradients); fused-parity.{txt,jsonl}, model-parity.txt.
#             Every performance change runs it (docs/benchmarks.md, "The fused path against transformers")
#   heldout   the memory planner's held-out rows (docs/memory-planner.md): shapes never used to fit
#             its constants, planned against measured peak (heldout.jsonl)
#   families  issue 22's families: the step checks (tests/gpu/step_checks) for Mistral-7B, Phi-3.5-mini, Gemma-2-9B and
#             Gemma-3-12B (families-check.txt: the MLP offload tier reported as not applying where the MLP has
#             no fused form; offload compared against a repeat of the same step), and Phi-3.5-mini LoRA 16K fast
#             (planned against measured peak; families-speed.jsonl)
#   window    sliding-window layers on flash attention's local band: model_parity_gpu attention at the 7B
#             shape's heads, 16K and 32K, window 4096 (the band checked against the explicit mask, then
#             timed beside the mask path: window-attention.jsonl), model_parity_gpu parity over every
#             family (padded, unpadded and packed rows against transformers bf16/fp32: model-parity.txt),
#             the step checks on Gemma-3-12B and its LoRA 16K fast row (window-*.jsonl)
#   moe       issue 27's rows: the grouped GEMM's selftest rows, transformers + PEFT on the Qwen3-30B-A3B shape (LoRA,
#             MOE_SEQS, default 16384) and odyssey-bench at its peak and fast (moe-{hf,odyssey}.jsonl, moe-compare.md)
#   tiled     tiled exact attention (Gemma-2's soft-capping): model_parity_gpu attention flash,tiled at 16K and
#             32K (tiled-attention.jsonl), Gemma-2-9B LoRA fast at 16K and 32K (tiled-gemma2.jsonl); with
#             `liger` after it (LIGER_SHAPES=gemma-2-9b LIGER_FAST=0) the anchor rows of docs/model.md
#   cudnn-softcap
#             issue 22: Gemma-2's global layers through cuDNN's rectangles (kernels/cudnn_attention.h,
#             docs/kernels.md): model_parity_gpu attention at Gemma-2-9B's heads (16/8 x 256, no window) at
#             16K and 32K, without a window and with Gemma-2's 4096 (CS_WINDOWS, default "0 4096"), the
#             cuDNN path checked against float64 and timed beside the band kernels (cudnn-attention.jsonl),
#             the selftest's cuDNN rows (selftest-cudnn.txt), then Gemma-2-9B LoRA under CS_ROWS (seq:GiB,
#             default the Liger anchors' peaks of 2026-12-04: 16384:28.16 32768:39.93; CS_ROWS=" " skips
#             them) with --cudnn-softcap each of CS_MODES (default "on off") and CS_FLAGS (e.g. "--offload
#             auto"; cudnn-gemma2.jsonl)
#   liger     issue 22's anchor: transformers + PEFT + Liger kernels (hf_bench.py --liger, every layer
#             checkpointed; needs the liger-kernel wheel carried in .whl/, see ../shared/gpu/NOTES.md) for
#             LIGER_SHAPES (default mistral-7b-v0.3 gemma-2-9b) at LIGER_SEQS (default 16384 32768), then
#             odyssey-bench at the anchor's peak memory (--memory-gib, the planner choosing; LIGER_BUDGET_FLAGS
#             added, e.g. "--offload on"; once per LIGER_VARIANTS, flag sets separated by ";", e.g.
#             "--cudnn-softcap on;--cudnn-softcap global", each right after its anchor; LIGER_OVER="0 1 2"
#             runs each at the peak plus 0, 1 and 2 GiB: the card's memory also holds the CUDA context
#             and the allocator's free blocks, which the anchor's allocated peak does not count, so a
#             row is read off as the fastest whose measured peak is at most the anchor's) and fast
#             (LIGER_FAST=0 skips it); liger-{hf,odyssey}.jsonl and liger-compare.md
#   frontier  issue 28's speed-memory frontier: per FRONTIER_ROWS row (shape:mode:seq; default 1.5B LoRA 24K, 0.5B
#             full 32K, 7B LoRA 24K and 32K) the HF + PEFT + Liger anchor (FRONTIER_PLAIN=1: plain HF too), then
#             odyssey-bench --frontier FRONTIER_POINTS (default 5) --offload on with the anchor's peak as a budget,
#             once per FRONTIER_OPTIMIZERS (default adamw; "adamw adamw-fp32" adds a sweep with fp32 master
#             weights, labelled adamw-fp32); frontier-{hf,odyssey}.jsonl, frontier-compare.md; needs the
#             liger-kernel wheel in .whl/
#   qlora     issue 24's anchors: transformers + PEFT + bitsandbytes QLoRA (hf_bench.py --quant nf4, every
#             layer checkpointed), without and with Liger, for QLORA_SHAPES (default llama-3.1-8b) at QLORA_SEQS
#             (default 16384); odyssey-bench --quant nf4 at each anchor's peak (--memory-gib, the planner choosing)
#             and fast; needs the bitsandbytes and liger-kernel wheels in .whl/ (bitsandbytes' 43 MB wheel with
#             only libbitsandbytes_cpu.so and _cuda130.so kept, `zip -d` of the others: 3.6 MB, so the carried tree
#             stays under 64 MiB); qlora-{hf,odyssey}.jsonl, qlora-compare.md
#   qlora-long
#             issue 24's length goals, one step each (no warmup: the step is minutes long, and one device
#             call may run ten): QLoRA r32 NF4 under an 80 GiB budget (QLONG_BUDGET) with offload, the
#             planner choosing checkpointing and checkpoint segments (layers_per_checkpoint auto), for
#             QLONG_ROWS (shape:tokens; default llama-3.3-70b-instruct:131072); qlora-long.jsonl
#   qlora-parity
#             fused_parity_gpu --case qwen2.5-1.5b:qlora (QLORA_PARITY_CASE): 20 QLoRA steps on the 4-bit
#             base transformers + bitsandbytes saved, every memory tier, against HF + PEFT + bitsandbytes
#             bf16 and fp32; needs the bitsandbytes wheel in .whl/; qlora-parity.{txt,jsonl}
#   installed `cmake --install` of the GPU build (LibTorch and its CUDA libraries bundled beside the
#             program, packaging/bundle-runtime.cmake; patchelf from .gpu-deps) run from the installed tree
#             with an empty environment: env, selftest, the quickstart on the GPU (installed.txt)
#   chat-template
#             docs/tokenizer.md's chat-template benchmark (CPU only): CT_N (default 100000) generated
#             multi-turn conversations rendered with Qwen2.5's template and tokenized by transformers'
#             apply_chat_template(tokenize=True) (tests/bench/chat_template_bench.py) and by Odyssey's data
#             pipeline (odyssey-bench --chat-template with the same template file: the built-in Qwen2.5
#             renderer that recognizes it, on 1 thread and on a run's default threads); chat-template.jsonl,
#             ids digests compared
#   generate  issue 26's generation rows (docs/benchmarks.md, "Generation"): tests/bench/generate_parity_gpu.py
#             (odyssey-train generate on CUDA in fp32 against transformers' greedy continuations of the tiny
#             models of every family: generate-parity.txt), then tests/bench/generate_bench.py (Qwen2.5-7B-shaped
#             random bf16 model: transformers generate with a static cache against odyssey-train generate, decode
#             tokens/s at batch 1 and 16 (prompt 1,024, 256 new) and time to first token at 32,000 prompt tokens;
#             generate.jsonl, generate-compare.md)
#   park-ab   the MLP park on 16-bit bases, side by side (docs/memory-planner.md, "The MLP park": the planner parks
#             4-bit bases only): per PARK_ROWS row (shape:seq:GiB:count:stride; default the parks the planner would
#             choose for issue 28's LoRA rows under the Liger anchors' peaks with the 4-bit rule lifted, and the 7B
#             whole-GPU plan's, GiB 0 = no budget) odyssey-bench --checkpointing auto --offload auto unparked
#             (--mlp-park 0), parked (--mlp-park count --mlp-park-stride stride), unparked, parked, one after the
#             other; with PARK_ANCHORS=1 the HF + PEFT + Liger anchor first; park-ab-{hf,odyssey}.jsonl and
#             park-ab-compare.md (the planned peak, which does not yet count the park's extra pair, against each)
#   dropout   ms-swift's default lora_dropout 0.05 against 0 on issue 28's LoRA rows (DROPOUT_ROWS shape:seq, default
#             the 7B at 24K): the Liger anchor with dropout 0.05, odyssey-bench under its peak with 0.05 and 0, the
#             anchor with 0 (DROPOUT_ANCHOR0=0 skips it); dropout-{hf,odyssey}.jsonl, dropout-compare.md
#   galore    Qwen2.5-7B-shaped full fine-tuning at 4K and 32K, every layer checkpointed: AdamW (pure
#             bf16), GaLore and Q-GaLore rank 128 (the README's figures and docs/optimizers.md's table:
#             run_optimizers_h200.sh one, writing galore.jsonl)
# `bash tests/bench/run_kernels_h200.sh build selftest odyssey-7b` runs those phases in order.
# Results go to $OUT (or ./bench-out). A device machine's copy of the working tree may lack .git or
# carry the .git of another commit (the session's base), so declare the commit the tree is:
#   ODYSSEY_COMMIT=<git rev-parse HEAD here, + -dirty if the tree has changes> bash tests/bench/run_kernels_h200.sh build headline
# (odyssey-bench takes it at build time, hf_bench.py at run time; it wins over git; both record commit_source).
set -u
OUT=${OUT:-$PWD/bench-out}
mkdir -p "$OUT"
B=build-gpu/app/odyssey-bench
C=build-gpu/tests/gpu/step_checks  # the step checks that were odyssey-bench --check
T=build-gpu/app/odyssey-train
phase() { echo "== $1 $(date +%T)"; }
for p in "$@"; do
  case $p in
  build)
    phase build
    export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
    TP=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
    NCCL=$(python3 -c 'import nvidia.nccl;print(nvidia.nccl.__path__[0])')
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TP" \
      -DODYSSEY_DEPS_PREFIX="$PWD/.gpu-deps" -DODYSSEY_BUILD_GUI=OFF -DODYSSEY_BUILD_TESTS=OFF \
      -DODYSSEY_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
      -DCMAKE_CXX_FLAGS="-isystem $NCCL/include" > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
    cmake --build build-gpu --target odyssey-train odyssey-bench step_checks > "$OUT/build.log" 2>&1 ||
      { grep -B2 -A12 -E "error|FAILED" "$OUT/build.log" | head -80; exit 1; }
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpus.csv" ;;
  installed)
    phase installed
    cmake build-gpu -DODYSSEY_PATCHELF="$PWD/.gpu-deps/usr/bin/patchelf" > "$OUT/cmake-install.log" 2>&1 ||
      { tail -30 "$OUT/cmake-install.log"; exit 1; }
    rm -rf /tmp/odyssey-inst /tmp/inst-run && mkdir -p /tmp/inst-run
    cmake --install build-gpu --prefix /tmp/odyssey-inst > "$OUT/install.log" 2>&1 || { tail -30 "$OUT/install.log"; exit 1; }
    I=/tmp/odyssey-inst/bin/odyssey-train
    clean=(env -i PATH=/usr/bin:/bin HOME=/tmp/inst-run LANG=C.UTF-8)
    {
      grep -E "bundling|several places" "$OUT/install.log"
      echo "installed tree: $(du -sh /tmp/odyssey-inst | cut -f1), $(ls /tmp/odyssey-inst/lib/odyssey | wc -l) bundled libraries"
      echo "RUNPATH: $(readelf -d $I | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')"
      echo "libraries from outside the installed tree and /lib, /usr/lib:"
      "${clean[@]}" ldd $I | grep -v -E "/tmp/odyssey-inst/|=> /lib/|=> /usr/lib/|linux-vdso|ld-linux" || echo "  none"
      cd /tmp/inst-run
      "${clean[@]}" $I env
      "${clean[@]}" $I selftest | tail -25
      "${clean[@]}" $I run --set device=cuda --set torch_dtype=bfloat16 --name installed-gpu 2>&1 | tail -4
      cd - > /dev/null
    } 2>&1 | tee "$OUT/installed.txt" ;;
  selftest)
    phase selftest
    $T selftest | tee "$OUT/selftest.txt" | tail -60
    $T selftest --json > "$OUT/selftest.jsonl" 2>/dev/null ;;
  odyssey-7b)
    phase odyssey-7b
    $C --shape qwen2.5-7b | tee -a "$OUT/check.jsonl" | cut -c1-300
    $B --label fast --checkpointing auto --shape qwen2.5-7b --mode lora --seq 32768,16384,4096 --steps 3 --warmup 2 \
      --out "$OUT/odyssey.jsonl" | cut -c1-600
    $B --label lean --checkpointing all --offload on --keep-attention none --shape qwen2.5-7b --mode lora --seq 32768 --steps 3 --warmup 2 \
      --out "$OUT/odyssey.jsonl" | cut -c1-600 ;;
  odyssey-05b)
    phase odyssey-05b
    $B --label fast --checkpointing auto --shape qwen2.5-0.5b --mode full,lora --seq 32768,16384 --steps 3 --warmup 2 \
      --out "$OUT/odyssey.jsonl" | cut -c1-600
    $B --label lean --checkpointing all --offload on --keep-attention none --shape qwen2.5-0.5b --mode full --seq 32768 --steps 3 --warmup 2 \
      --out "$OUT/odyssey.jsonl" | cut -c1-600 ;;
  budget-05b)
    phase budget-05b
    for g in ${BUDGETS:-24 25 26}; do
      $B --label "budget $g GiB" --checkpointing auto --memory-gib $g --shape qwen2.5-0.5b --mode full --seq 32768 \
        --steps 3 --warmup 2 --out "$OUT/odyssey.jsonl" | cut -c1-600
    done ;;
  profile-05b)
    phase profile-05b
    $B --label fast --checkpointing auto --shape qwen2.5-0.5b --mode full --seq 32768 --steps 3 --warmup 2 \
      --profile "$OUT/profile.jsonl" --out "$OUT/odyssey.jsonl" | cut -c1-600 ;;
  hf-32k)
    phase hf-32k
    python3 tests/bench/hf_bench.py --device cuda --dtype bfloat16 --shape qwen2.5-7b --mode lora --seq 32768 \
      --steps 3 --warmup 2 --out "$OUT/hf.jsonl" 2>&1 | tail -2
    python3 tests/bench/hf_bench.py --device cuda --dtype bfloat16 --shape qwen2.5-0.5b --mode full --seq 32768 \
      --steps 3 --warmup 2 --out "$OUT/hf.jsonl" 2>&1 | tail -2 ;;
  reference)
    phase "odyssey reference ops"
    $B --label reference --fused off --checkpointing all --shape qwen2.5-7b --mode lora --seq 32768 --steps 3 --warmup 2 --out "$OUT/odyssey.jsonl" | cut -c1-400 ;;
  hf)
    phase hf
    python3 tests/bench/hf_bench.py --device cuda --dtype bfloat16 --shape qwen2.5-7b --mode lora --seq 4096,16384,32768 \
      --steps 3 --warmup 2 --out "$OUT/hf.jsonl" 2>&1 | tail -4
    python3 tests/bench/hf_bench.py --device cuda --dtype bfloat16 --shape qwen2.5-0.5b --mode full,lora --seq 16384,32768 \
      --steps 3 --warmup 2 --out "$OUT/hf.jsonl" 2>&1 | tail -4 ;;
  long)
    phase long
    for s in ${LONG_SEQS:-131072 262144 524288}; do
      $B --label lean --checkpointing all --offload on --shape qwen2.5-7b --mode lora --seq $s --steps 1 --warmup 0 \
        --out "$OUT/long.jsonl" | cut -c1-600
    done ;;
  kept)
    phase kept
    for k in none auto; do
      $B --label "lean, keep_attention $k" --checkpointing all --offload on --keep-attention $k --shape qwen2.5-7b \
        --mode lora --seq 131072 --steps 1 --warmup 0 --out "$OUT/kept.jsonl" | cut -c1-600
    done ;;
  compare)
    phase compare
    python3 tests/bench/compare.py ${COMPARE_ARGS:-} "$OUT/hf.jsonl" "$OUT/odyssey.jsonl" ;;
  headline)
    phase headline
    HO="$OUT/headline-odyssey.jsonl" HH="$OUT/headline-hf.jsonl"
    R="--steps 3 --warmup 2"
    S7="--shape qwen2.5-7b --mode lora --seq 32768" S05="--shape qwen2.5-0.5b --mode full --seq 32768"
    LEAN="--checkpointing all --offload on --keep-attention none"
    $B --label fast --checkpointing auto $S7 $R --out "$HO" | cut -c1-400
    $B --label lean $LEAN $S7 $R --out "$HO" | cut -c1-400
    $B --label fast --checkpointing auto $S05 $R --out "$HO" | cut -c1-400
    $B --label lean $LEAN $S05 $R --out "$HO" | cut -c1-400
    $B --label "offload budget 23 GiB" --checkpointing auto --offload on --memory-gib 23 $S05 $R --out "$HO" | cut -c1-400
    for S in "$S7" "$S05"; do
      python3 tests/bench/hf_bench.py --device cuda --dtype bfloat16 $S --checkpointing on,off $R --out "$HH" 2>&1 |
        grep -v '^{' | tail -3
      if [ "${HEADLINE_HELD:-1}" != 0 ]; then
        python3 tests/bench/hf_bench.py --device cuda --dtype bfloat16 $S --checkpointing on --hold-logits $R \
          --out "$HH" 2>&1 | grep -v '^{' | tail -3
      fi
    done
    python3 tests/bench/compare.py "$HH" "$HO" | tee "$OUT/headline-compare.md" ;;
  parity)
    phase parity
    cmake --build build-gpu --target fused_parity_gpu model_parity_gpu > "$OUT/build-parity.log" 2>&1 ||
      { grep -B2 -A12 -E "error|FAILED" "$OUT/build-parity.log" | head -60; exit 1; }
    build-gpu/tests/gpu/model_parity_gpu parity > "$OUT/model-parity.txt" 2>&1
    echo "model_parity_gpu parity exit $?"; grep -E "^[a-z0-9]+ \(|PASS|FAIL" "$OUT/model-parity.txt" | tail -8
    build-gpu/tests/gpu/fused_parity_gpu --work /tmp/odyssey-fused-parity --out "$OUT/fused-parity.jsonl" 2>&1 |
      grep -v -E "^\[(bf16|fp32)\]|it/s\]" > "$OUT/fused-parity.txt"
    echo "fused_parity_gpu exit ${PIPESTATUS[0]}"; grep -E "^qwen|  (per-token|loss curve|grad norm)|PASS|FAIL" "$OUT/fused-parity.txt" ;;
  qlora-parity)
    phase qlora-parity
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    cmake --build build-gpu --target fused_parity_gpu > "$OUT/build-parity.log" 2>&1 ||
      { grep -B2 -A12 -E "error|FAILED" "$OUT/build-parity.log" | head -60; exit 1; }
    build-gpu/tests/gpu/fused_parity_gpu --case ${QLORA_PARITY_CASE:-qwen2.5-1.5b:qlora} --work /tmp/odyssey-qlora-parity \
      --out "$OUT/qlora-parity.jsonl" 2>&1 | grep -v -E "^\[(bf16|fp32)\]|it/s\]" > "$OUT/qlora-parity.txt"
    echo "fused_parity_gpu exit ${PIPESTATUS[0]}"; grep -E "^qwen|  (per-token|loss curve|grad norm|seconds)|PASS|FAIL" "$OUT/qlora-parity.txt" ;;
  heldout)
    phase heldout
    H="$OUT/heldout.jsonl" R="--steps 3 --warmup 2"
    $B --label "held-out fast" --checkpointing auto --shape qwen2.5-1.5b --mode full --seq 16384 $R --out "$H" | cut -c1-300
    $B --label "held-out fast" --checkpointing auto --shape qwen2.5-3b --mode lora --seq 32768 $R --out "$H" | cut -c1-300
    $B --label "held-out lean" --checkpointing all --offload on --shape llama-3.1-8b-instruct --mode lora --seq 16384 $R \
      --out "$H" | cut -c1-300
    $B --label "held-out budget 40 GiB" --checkpointing auto --memory-gib 40 --shape qwen3-8b --mode lora --seq 32768 $R \
      --out "$H" | cut -c1-300 ;;
  families)
    phase families
    for S in mistral-7b-v0.3 phi-3.5-mini-instruct gemma-2-9b gemma-3-12b-it; do
      echo "== check $S"
      $C --shape $S | tee -a "$OUT/families-check.jsonl" | cut -c1-700
    done > "$OUT/families-check.txt" 2>&1
    grep -E '^== |"pass": false' "$OUT/families-check.txt" | cut -c1-300
    $B --label fast --checkpointing auto --shape phi-3.5-mini-instruct --mode lora --seq 16384 --steps 3 --warmup 2 \
      --out "$OUT/families-speed.jsonl" | cut -c1-400 ;;
  window)
    phase window
    cmake --build build-gpu --target model_parity_gpu > "$OUT/build-window.log" 2>&1 ||
      { grep -B2 -A12 -E "error|FAILED" "$OUT/build-window.log" | head -60; exit 1; }
    for Q in 16384 32768; do
      build-gpu/tests/gpu/model_parity_gpu attention --seq $Q --window 4096 --attention varlen-flash,window-mask
    done > "$OUT/window-attention.jsonl" 2>&1
    echo "window attention exit $?"; cut -c1-260 "$OUT/window-attention.jsonl"
    build-gpu/tests/gpu/model_parity_gpu parity > "$OUT/model-parity.txt" 2>&1
    echo "model_parity_gpu parity exit $?"; grep -E "^[a-z0-9_]+ \(|packed|FAIL|PASS" "$OUT/model-parity.txt" | tail -40
    $C --shape gemma-3-12b-it 2>&1 | tee "$OUT/window-check.jsonl" > "$OUT/window-check.txt"
    echo "gemma-3 check exit ${PIPESTATUS[0]}"; grep -E '"pass": false|attention' "$OUT/window-check.txt" | cut -c1-300 | head -12
    $B --label fast --checkpointing auto --shape gemma-3-12b-it --mode lora --seq 16384 --steps 3 --warmup 2 \
      --out "$OUT/window-speed.jsonl" | cut -c1-400 ;;
  moe)
    # issue 27's rows (docs/moe.md, docs/benchmarks.md "Mixture of experts"): the grouped GEMM's selftest rows,
    # then transformers + PEFT (transformers 5.17's grouped_mm experts, every layer checkpointed) on the
    # Qwen3-30B-A3B shape, LoRA at MOE_SEQS (default 16384), and odyssey-bench at the anchor's peak and fast;
    # moe-{hf,odyssey}.jsonl, moe-compare.md. MOE_LIGER=1 adds the Liger anchor (needs .whl/).
    phase moe
    $T selftest | grep -E "grouped_linear|checks passed" | tee "$OUT/moe-selftest.txt"
    MH="$OUT/moe-hf.jsonl" MO="$OUT/moe-odyssey.jsonl" R="--steps ${MOE_STEPS:-3} --warmup 2" S=${MOE_SHAPE:-qwen3-30b-a3b}
    [ "${MOE_LIGER:-0}" = 1 ] && python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
      export PYTHONPATH=/tmp/site
    for Q in ${MOE_SEQS:-16384}; do
      python3 tests/bench/hf_bench.py --device cuda --dtype bfloat16 ${MOE_LIGER:+$([ "$MOE_LIGER" = 1 ] && echo --liger)} \
        --shape $S --mode lora --seq $Q --checkpointing on $R --out "$MH" 2>&1 | grep -v '^{' | grep -v -i warn | tail -2
      peak=$(python3 -c "import json
rows=[json.loads(l) for l in open('$MH') if l.strip()]
r=[x for x in rows if x['shape']=='$S' and x['seq']==$Q]
print(r[-1].get('peak_gib') or '' if r else '')")
      [ -n "$peak" ] && $B --label "budget = hf peak" --checkpointing auto --memory-gib "$peak" --shape $S --mode lora \
        --seq $Q $R --out "$MO" | cut -c1-400
      $B --label fast --checkpointing auto --shape $S --mode lora --seq $Q $R --out "$MO" | cut -c1-400
    done
    python3 tests/bench/compare.py "$MH" "$MO" | tee "$OUT/moe-compare.md" ;;
  tiled)
    phase tiled
    cmake --build build-gpu --target model_parity_gpu > "$OUT/build-tiled.log" 2>&1 ||
      { grep -B2 -A12 -E "error|FAILED" "$OUT/build-tiled.log" | head -60; exit 1; }
    for Q in 16384 32768; do
      build-gpu/tests/gpu/model_parity_gpu attention --seq $Q --attention flash,tiled
    done > "$OUT/tiled-attention.jsonl" 2>&1
    cut -c1-250 "$OUT/tiled-attention.jsonl"
    for Q in 16384 32768; do
      $B --label fast --checkpointing auto --shape gemma-2-9b --mode lora --seq $Q --steps 3 --warmup 2 \
        --out "$OUT/tiled-gemma2.jsonl" | cut -c1-400
    done ;;
  cudnn-softcap)
    phase cudnn-softcap
    grep -i "cudnn graph API\|no cudnn_frontend" "$OUT/cmake.log"
    cmake --build build-gpu --target model_parity_gpu > "$OUT/build-cudnn.log" 2>&1 ||
      { grep -B2 -A12 -E "error|FAILED" "$OUT/build-cudnn.log" | head -60; exit 1; }
    for W in ${CS_WINDOWS:-0 4096}; do
      for Q in 16384 32768; do
        build-gpu/tests/gpu/model_parity_gpu attention --seq $Q --heads 16,8,256 --window $W --attention tiled-cudnn,tiled
      done
    done 2>&1 | grep '^{' > "$OUT/cudnn-attention.jsonl"
    cut -c1-300 "$OUT/cudnn-attention.jsonl"
    $T selftest > "$OUT/selftest-all.txt" 2>&1
    grep -i -E "cudnn|kernel|passed|failed" "$OUT/selftest-all.txt" | tee "$OUT/selftest-cudnn.txt" | grep -i -E "cudnn|passed|failed"
    for r in ${CS_ROWS:-16384:28.16 32768:39.93}; do
      Q=${r%%:*} G=${r##*:}
      for cs in ${CS_MODES:-on off}; do
        $B --label "budget $G GiB, cudnn-softcap $cs" --cudnn-softcap $cs --checkpointing auto --memory-gib $G ${CS_FLAGS:-} \
          --shape gemma-2-9b --mode lora --seq $Q --steps 3 --warmup 2 --out "$OUT/cudnn-gemma2.jsonl" | cut -c1-500
      done
    done ;;
  liger)
    phase liger
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    LH="$OUT/liger-hf.jsonl" LO="$OUT/liger-odyssey.jsonl" R="--steps 3 --warmup 2"
    for S in ${LIGER_SHAPES:-mistral-7b-v0.3 gemma-2-9b}; do
      for Q in ${LIGER_SEQS:-16384 32768}; do
        python3 tests/bench/hf_bench.py --device cuda --dtype bfloat16 --liger --shape $S --mode lora --seq $Q \
          --checkpointing on $R --out "$LH" 2>&1 | grep -v '^{' | grep -v -i warn | tail -2
        peak=$(python3 -c "import json,sys
rows=[json.loads(l) for l in open('$LH') if l.strip()]
r=[x for x in rows if x['shape']=='$S' and x['seq']==$Q]
print(r[-1].get('peak_gib') or '')")
        IFS=';' read -ra variants <<< "${LIGER_VARIANTS:-}"
        [ ${#variants[@]} -gt 0 ] || variants=("")
        for x in "${variants[@]}"; do
          [ -n "$peak" ] || break
          f=$(echo ${LIGER_BUDGET_FLAGS:-} $x)
          for over in ${LIGER_OVER:-0}; do
            g=$(python3 -c "print(round($peak + $over, 2))")
            $B --label "budget = liger peak$([ "$over" = 0 ] || echo " + $over GiB")${f:+ ($f)}" --checkpointing auto \
              --memory-gib "$g" $f --shape $S --mode lora --seq $Q $R --out "$LO" | cut -c1-400
          done
        done
        [ "${LIGER_FAST:-1}" = 0 ] ||
          $B --label fast --checkpointing auto --shape $S --mode lora --seq $Q $R --out "$LO" | cut -c1-400
      done
    done
    python3 tests/bench/compare.py "$LH" "$LO" | tee "$OUT/liger-compare.md" ;;
  frontier)
    # issue 28: the speed-memory frontier against transformers + PEFT + Liger. Per row of
    # FRONTIER_ROWS (shape:mode:seq), the Liger anchor (hf_bench.py --liger, every layer
    # checkpointed; FRONTIER_PLAIN=1 adds plain HF), then odyssey-bench --frontier
    # FRONTIER_POINTS (default 5) with offload on and the anchor's peak as one more budget;
    # frontier-{hf,odyssey}.jsonl, frontier-compare.md (compare.py --frontier-plot draws the PNGs
    # where matplotlib is). Needs the liger-kernel wheel in .whl/.
    phase frontier
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    FH="$OUT/frontier-hf.jsonl" FO="$OUT/frontier-odyssey.jsonl"
    for row in ${FRONTIER_ROWS:-qwen2.5-1.5b:lora:24576 qwen2.5-0.5b:full:32768 qwen2.5-7b:lora:24576 qwen2.5-7b:lora:32768}; do
      IFS=: read -r S M Q <<< "$row"
      for L in --liger $([ "${FRONTIER_PLAIN:-0}" = 1 ] && echo plain); do
        python3 tests/bench/hf_bench.py --device cuda --dtype bfloat16 $([ "$L" = --liger ] && echo --liger) --shape $S \
          --mode $M --seq $Q --checkpointing on --steps 3 --warmup 2 --out "$FH" 2>&1 | grep -v '^{' | grep -v -i warn | tail -2
      done
      peak=$(python3 -c "import json
rows=[json.loads(l) for l in open('$FH') if l.strip()]
r=[x for x in rows if x['shape']=='$S' and x['mode']=='$M' and x['seq']==$Q and x.get('liger') and x.get('peak_gib')]
print(r[-1]['peak_gib'] if r else '')")
      for opt in ${FRONTIER_OPTIMIZERS:-adamw}; do  # adamw-fp32: full rows with fp32 master weights too
        $B --frontier ${FRONTIER_POINTS:-5} ${peak:+--frontier-at $peak} --offload on --shape $S --mode $M --seq $Q \
          --optimizer $opt $([ $opt != adamw ] && echo --label $opt) --steps ${FRONTIER_STEPS:-2} --warmup 1 \
          --out "$FO" | cut -c1-300
      done
    done
    python3 tests/bench/compare.py "$FH" "$FO" $(python3 -c "import matplotlib" 2>/dev/null && echo --frontier-plot "$OUT") |
      tee "$OUT/frontier-compare.md" ;;
  qlora)
    phase qlora
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    QH="$OUT/qlora-hf.jsonl" QO="$OUT/qlora-odyssey.jsonl" R="--steps 3 --warmup 2"
    for S in ${QLORA_SHAPES:-llama-3.1-8b}; do
      for Q in ${QLORA_SEQS:-16384}; do
        for L in "" "--liger"; do
          python3 tests/bench/hf_bench.py --device cuda --dtype bfloat16 --quant nf4 $L --shape $S --mode lora --seq $Q \
            --checkpointing on $R --out "$QH" 2>&1 | grep -v '^{' | grep -v -i warn | tail -2
          peak=$(python3 -c "import json
rows=[json.loads(l) for l in open('$QH') if l.strip()]
r=[x for x in rows if x['shape']=='$S' and x['seq']==$Q and bool(x.get('liger'))==bool('$L')]
print(r[-1].get('peak_gib') or '' if r else '')")
          f=${QLORA_BUDGET_FLAGS:-}
          [ -n "$peak" ] && $B --label "budget = hf+bnb${L:+ +liger} peak${f:+ ($f)}" --checkpointing auto \
            --memory-gib "$peak" $f --quant nf4 --shape $S --mode lora --seq $Q $R --out "$QO" | cut -c1-400
        done
        [ "${QLORA_FAST:-1}" = 0 ] ||
          $B --label fast --checkpointing auto --quant nf4 --shape $S --mode lora --seq $Q $R --out "$QO" | cut -c1-400
      done
      # Long single steps under a card's budget (QLORA_LONG tokens, QLORA_BUDGET GiB, r32 as Unsloth's table).
      for Q in ${QLORA_LONG:-}; do
        $B --label "r32 at ${QLORA_BUDGET:-80} GiB" --checkpointing auto --offload on --memory-gib ${QLORA_BUDGET:-80} \
          --lora-r 32 --lora-alpha 64 --quant nf4 --shape $S --mode lora --seq $Q --steps 1 --warmup 1 --out "$QO" | cut -c1-400
      done
    done
    python3 tests/bench/compare.py "$QH" "$QO" | tee "$OUT/qlora-compare.md" ;;
  park-ab)
    phase park-ab
    PH="$OUT/park-ab-hf.jsonl" PO="$OUT/park-ab-odyssey.jsonl" R="--steps 3 --warmup 2"
    [ "${PARK_ANCHORS:-0}" = 1 ] && python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
      export PYTHONPATH=/tmp/site
    for row in ${PARK_ROWS:-qwen2.5-7b:32768:32.3:13:2 qwen2.5-7b:24576:27.92:9:3 qwen2.5-1.5b:24576:9.03:6:5 qwen2.5-7b:32768:0:6:2}; do
      IFS=: read -r S Q G N K <<< "$row"
      if [ "${PARK_ANCHORS:-0}" = 1 ]; then
        python3 tests/bench/hf_bench.py --device cuda --dtype bfloat16 --liger --shape $S --mode lora --seq $Q \
          --checkpointing on $R --out "$PH" 2>&1 | grep -v '^{' | grep -v -i warn | tail -2
      fi
      budget="" where=", no budget"
      [ "$G" != 0 ] && budget="--memory-gib $G" where=" under $G GiB"
      for parked in 0 1 0 1; do
        if [ $parked = 1 ]; then park="$N --mlp-park-stride $K" label="$N parked, one in every $K"
        else park=0 label="none parked"; fi
        $B --label "$label$where" --checkpointing auto --offload auto $budget --mlp-park $park \
          --shape $S --mode lora --seq $Q $R --out "$PO" | cut -c1-400
      done
    done
    python3 tests/bench/compare.py $( [ -f "$PH" ] && echo "$PH") "$PO" | tee "$OUT/park-ab-compare.md" ;;
  dropout)
    # ms-swift's default lora_dropout 0.05 against dropout 0 (every other row's), issue 28's LoRA rows: per
    # DROPOUT_ROWS row (shape:seq) the HF + PEFT + Liger anchor with dropout 0.05, odyssey-bench under its peak with
    # dropout 0.05 and with 0 (DROPOUT_PS, default "0.05 0"), then (DROPOUT_ANCHOR0=1, the default) the anchor with
    # dropout 0 (dropout-{hf,odyssey}.jsonl, dropout-compare.md). The fused path recomputes the mask in backward
    # (kernels::LoraDropout) instead of keeping it.
    phase dropout
    DH="$OUT/dropout-hf.jsonl" DO="$OUT/dropout-odyssey.jsonl" R="--steps 3 --warmup 2"
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    for row in ${DROPOUT_ROWS:-qwen2.5-7b:24576}; do
      IFS=: read -r S Q <<< "$row"
      python3 tests/bench/hf_bench.py --device cuda --dtype bfloat16 --liger --lora-dropout 0.05 --shape $S --mode lora \
        --seq $Q --checkpointing on $R --out "$DH" 2>&1 | grep -v '^{' | grep -v -i warn | tail -2
      G=$(python3 -c "import json;l=[json.loads(x) for x in open('$DH') if x.strip()];print(l[-1].get('peak_gib', 0))")
      for p in ${DROPOUT_PS:-0.05 0}; do
        $B --label "dropout $p under $G GiB" --checkpointing auto --offload auto --memory-gib $G --lora-dropout $p \
          --shape $S --mode lora --seq $Q $R --out "$DO" | cut -c1-400
      done
      [ "${DROPOUT_ANCHOR0:-1}" = 1 ] && python3 tests/bench/hf_bench.py --device cuda --dtype bfloat16 --liger \
        --shape $S --mode lora --seq $Q --checkpointing on $R --out "$DH" 2>&1 | grep -v '^{' | grep -v -i warn | tail -2
    done
    python3 tests/bench/compare.py "$DH" "$DO" | tee "$OUT/dropout-compare.md" ;;
  qlora-long)
    phase qlora-long
    for row in ${QLONG_ROWS:-llama-3.3-70b-instruct:131072}; do
      $B --label "r32 at ${QLONG_BUDGET:-80} GiB, one step" --checkpointing auto --offload on \
        --memory-gib ${QLONG_BUDGET:-80} --lora-r 32 --lora-alpha 64 --quant nf4 --shape ${row%%:*} --mode lora \
        --seq ${row##*:} --steps 1 --warmup 0 --out "$OUT/qlora-long.jsonl" | cut -c1-600
    done ;;
  qlora-layers)
    # One long step's cost per decoder layer, where the whole model's step is longer than a device
    # call may run: the same shape with QLAYERS of its layers (default 2 and 4), every layer
    # checkpointed two to a stored input, inputs on the host, no kept attention, 16,384-token MLP
    # tiles (what the planner chooses for the whole 8B at 500,000 tokens in 80 GiB). The
    # difference of two lines is the per-layer time; the rest (embedding, loss) is the intercept.
    phase qlora-layers
    for L in ${QLAYERS:-2 4}; do
      $B --label "$L layers, per-layer timing" --layers $L --checkpointing all --layers-per-checkpoint 2 \
        --keep-attention none --mlp-tile 16384 --offload on --memory-gib ${QLAYERS_BUDGET:-78} --lora-r 32 \
        --lora-alpha 64 --quant nf4 --shape ${QLAYERS_SHAPE:-llama-3.1-8b} --mode lora --seq ${QLAYERS_SEQ:-500000} \
        --steps 1 --warmup ${QLAYERS_WARMUP:-0} --out "$OUT/qlora-layers.jsonl" | cut -c1-600
    done ;;
  chat-template)
    phase chat-template
    CJ="$OUT/chat-template.jsonl" CONV=/tmp/odyssey-convs.jsonl
    TOKJ=resources/quickstart/model/tokenizer.json TPL=tests/reference/chat_templates/Qwen--Qwen2.5-7B-Instruct.jinja
    python3 tests/bench/chat_template_bench.py make --n ${CT_N:-100000} --out $CONV
    $B --chat-template $CONV --tokenizer $TOKJ --template-file $TPL --threads 1 --out "$CJ" | cut -c1-300
    $B --chat-template $CONV --tokenizer $TOKJ --template-file $TPL --threads 0 --out "$CJ" | cut -c1-300
    python3 tests/bench/chat_template_bench.py time $CONV --tokenizer $TOKJ --template $TPL --out "$CJ" | cut -c1-300
    python3 -c "import json,sys
rows=[json.loads(l) for l in open('$CJ')]
print('ids digests equal:', len({r['ids_sha256'] for r in rows}) == 1)" ;;
  generate)
    phase generate
    python3 tests/bench/generate_parity_gpu.py --odyssey-train $T --out "$OUT/generate-parity.txt"
    python3 tests/bench/generate_bench.py --odyssey-train $T --out "$OUT" --shape ${GEN_SHAPE:-qwen2.5-7b} 2>&1 |
      grep -v -E "Loading weights|Writing model" | tail -30 ;;
  galore)
    phase galore
    for opt in galore q-galore adamw; do
      $B --shape qwen2.5-7b --mode full --optimizer $opt --galore-rank 128 --checkpointing all --seq 4096,32768 \
        --steps 3 --warmup 1 --out "$OUT/galore.jsonl" | cut -c1-300
    done ;;
  *) echo "unknown phase $p"; exit 2 ;;
  esac
done
