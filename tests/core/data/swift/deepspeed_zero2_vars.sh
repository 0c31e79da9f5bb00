# two GPUs, ZeRO-2; the script's own variables
gpus=2
lr=2e-4

CUDA_VISIBLE_DEVICES=0,1 \
NPROC_PER_NODE=$gpus \
swift sft \
    --model Qwen/Qwen2.5-1.5B-Instruct \
    --tuner_type lora \
    --dataset "data/sft.jsonl#2000" \
    --learning_rate "$lr" \
    --lora_rank 16 \
    --lora_alpha 32 \
    --gradient_accumulation_steps $(expr 32 / $gpus) \
    --max_length 4096 \
    --output_dir "output/zero2-$gpus" \
    --model_author odyssey \
    --deepspeed zero2
