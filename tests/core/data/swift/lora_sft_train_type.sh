# ms-swift 3.x spelling: --train_type
CUDA_VISIBLE_DEVICES=0 \
swift sft \
    --model Qwen/Qwen2.5-7B-Instruct \
    --train_type lora \
    --dataset 'data/zh.jsonl#500' \
              'data/en.jsonl#500' \
              'data/self-cognition.jsonl#500' \
    --torch_dtype bfloat16 \
    --num_train_epochs 2 \
    --lora_rank 8 \
    --lora_alpha 32 \
    --eval_steps 50 \
    --max_length 2048 \
    --system 'You are a helpful assistant.'
