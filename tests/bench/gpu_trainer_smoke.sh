#!/usr/bin/env bash
# The trainer's stages on one GPU (device kind nvidia-h200), after issue 21 split run_training:
# builds odyssey-train (Release, CUDA kernels), runs `selftest`, then trains the quickstart on
# the GPU in bf16 with the fused kernels:
#   full     30 steps, checkpoints at 10, 20, 30
#   resume   the same job resumed from full's checkpoint-10 (checksums verified): its steps
#            11..30 must print the same losses as full's
#   clash    a checkpoint-10 made by hand in a fresh run's directory: the run fails naming it
#   devfull  events.jsonl replaced by a link to /dev/full mid-run: exit 1, status "failed"
#   lora     LoRA r8 with the fused kernels, 20 steps (the PEFT adapter path on CUDA)
#   master   full with optimizer_dtype fp32 (fp32 master weights, ZeRO-2's optimizer over a group of
#            one on CUDA), resumed from its checkpoint-10: the same losses from step 11 on
#   OUT=/tmp/smoke bash tests/bench/gpu_trainer_smoke.sh     (needs .gpu-deps: docs/building.md)
set -u
OUT=${OUT:-$PWD/smoke-out}
mkdir -p "$OUT"
TP=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
NCCL=$(python3 -c 'import nvidia.nccl;print(nvidia.nccl.__path__[0])')
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TP" \
  -DODYSSEY_DEPS_PREFIX="$PWD/.gpu-deps" -DODYSSEY_BUILD_GUI=OFF -DODYSSEY_BUILD_TESTS=OFF \
  -DODYSSEY_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CXX_FLAGS="-isystem $NCCL/include" \
  > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build-gpu --target odyssey-train > "$OUT/build.log" 2>&1 ||
  { grep -B2 -A12 -E "error|FAILED" "$OUT/build.log" | head -80; exit 1; }
T=build-gpu/app/odyssey-train
echo "== selftest"; $T selftest > "$OUT/selftest.txt" 2>&1; echo "selftest exit $?"; tail -3 "$OUT/selftest.txt"
python3 resources/quickstart/make_model.py > /dev/null 2>&1
base=(presets/quickstart.yaml --set device=cuda --set torch_dtype=bfloat16 --set fused_kernels=true
      --set max_steps=30 --set save_steps=10 --set save_total_limit=0 --set eval_steps=0)
run() { n=$1; shift; $T run "${base[@]}" --name "$n" --set output_dir="$OUT/runs" "$@" > "$OUT/$n.log" 2> "$OUT/$n.err"
        echo "$n exit $?"; }
run full; full_dir=$(ls -d "$OUT"/runs/*-full); ls "$full_dir/checkpoints"
run resume --set resume_from_checkpoint="$full_dir/checkpoints/checkpoint-10"
# Losses from events.jsonl (full precision): the resumed run's steps against the same steps of full.
python3 - "$full_dir" "$(ls -d "$OUT"/runs/*-resume)" <<'PY'
import json, sys
def losses(d):
    out = {}
    for line in open(d + "/events.jsonl"):
        e = json.loads(line)
        if e.get("type") == "step": out[e["step"]] = e["loss"]
    return out
a, b = losses(sys.argv[1]), losses(sys.argv[2])
same = [s for s in b if a.get(s) == b[s]]
print("resumed steps", min(b), "..", max(b), "; equal to the uninterrupted run's:", len(same), "of", len(b))
for s in (min(b), max(b)): print("step", s, "full", a.get(s), "resumed", b[s])
PY
# A clash: the run directory is made by the run itself, so plant checkpoint-10 once it exists.
($T run "${base[@]}" --name clash --set output_dir="$OUT/runs" > "$OUT/clash.log" 2> "$OUT/clash.err"; echo "clash exit $?" > "$OUT/clash.rc") &
for i in $(seq 100); do d=$(ls -d "$OUT"/runs/*-clash 2>/dev/null) && [ -d "$d/checkpoints" ] && break; sleep 0.1; done
mkdir -p "$d/checkpoints/checkpoint-10" && echo keep > "$d/checkpoints/checkpoint-10/precious.txt"; wait
cat "$OUT/clash.rc"; tail -1 "$OUT/clash.err"; ls "$d/checkpoints/checkpoint-10"
($T run "${base[@]}" --name devfull --set max_steps=400 --set output_dir="$OUT/runs" > "$OUT/devfull.log" 2> "$OUT/devfull.err"; echo "devfull exit $?" > "$OUT/devfull.rc") &
for i in $(seq 300); do grep -q '"step":3,' "$OUT"/runs/*-devfull/events.jsonl 2>/dev/null && break; sleep 0.1; done
e=$(ls "$OUT"/runs/*-devfull/events.jsonl); mv "$e" "$e.old"; ln -s /dev/full "$e"; wait
cat "$OUT/devfull.rc"; cat "$OUT/devfull.err"; python3 -c "import json,sys;s=json.load(open(sys.argv[1]));print(s['state'],s['step'],s['reason'][:160])" "$(dirname "$e")/status.json"
run lora --set tuner_type=lora --set lora_rank=8 --set max_steps=20 --set learning_rate=0.0005
grep -E "^step (1|20)/" "$OUT/lora.log"; ls "$(ls -d "$OUT"/runs/*-lora)/checkpoints/checkpoint-20"
run master --set optimizer_dtype=fp32 --set max_steps=20
run master_resume --set optimizer_dtype=fp32 --set max_steps=20 \
  --set resume_from_checkpoint="$(ls -d "$OUT"/runs/*-master)/checkpoints/checkpoint-10"
grep -h '"type":"run_start"' "$(ls -d "$OUT"/runs/*-master)/events.jsonl" | python3 -c "import json,sys;print(json.loads(sys.stdin.readline())['optimizer'])"
python3 - "$(ls -d "$OUT"/runs/*-master)" "$(ls -d "$OUT"/runs/*-master_resume)" <<'PY'
import json, sys
def losses(d):
    return {e["step"]: e["loss"] for e in map(json.loads, open(d + "/events.jsonl")) if e.get("type") == "step"}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print("fp32 masters: resumed steps", min(b), "..", max(b), "equal:", sum(a.get(s) == b[s] for s in b), "of", len(b))
PY
