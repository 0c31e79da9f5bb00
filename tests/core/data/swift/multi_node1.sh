# node 0 of 2
NNODES=2 \
NODE_RANK=0 \
MASTER_ADDR=10.0.0.1 \
MASTER_PORT=29600 \
NPROC_PER_NODE=4 \
CUDA_VISIBLE_DEVICES=0,1,2,3 \
swift sft \
    --model Qwen/Qwen2.5-14B-Instruct \
    --tuner_type full \
    --dataset data/a.jsonl data/b.jsonl \
    --split_dataset_ratio 0.02 \
    --max_length 16384 \
    --deepspeed zero2_offload
