# 8 GPUs, 64K tokens per sample: Ulysses + ring over all eight
NPROC_PER_NODE=8 \
CELOSS_PARALLEL_SIZE=2048 \
swift sft \
    --model Qwen/Qwen2.5-7B-Instruct \
    --tuner_type lora \
    --dataset 'data/long_chat.jsonl' \
    --streaming false \
    --torch_dtype bfloat16 \
    --per_device_train_batch_size 2 \
    --gradient_accumulation_steps 4 \
    --save_total_limit 3 \
    --save_only_model true \
    --save_steps 100 \
    --max_length 65536 \
    --warmup_ratio 0.03 \
    --attn_impl flash_attn \
    --sequence_parallel_size 8 \
    --logging_steps 2 \
    --use_logits_to_keep false \
    --padding_free true \
