#!/bin/bash
# Multi-node GRPO/DAPO training with SLURM: one torchrun agent per node, one rank per GPU, FSDP2 inside.
#   sbatch examples/slurm_train.sh examples/gsm8k.yaml model.path=/models/Qwen2.5-1.5B-Instruct data.source=/data/gsm8k/train.jsonl
# Resume after a failure (same node and GPU counts: the optimizer is saved in one shard per rank):
#   sbatch examples/slurm_train.sh --resume runs/gsm8k
# train.out_dir must be on a filesystem every node sees (checkpoint shards are written by every rank).
#SBATCH --job-name=tailrl
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=32
#SBATCH --time=24:00:00
#SBATCH --output=%x-%j.out
set -euo pipefail

GPUS_PER_NODE=${SLURM_GPUS_ON_NODE:-8}
HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
PORT=${PORT:-29500}

# every agent meets the others at the first node (c10d rendezvous); the job id names the run's rendezvous,
# so without train.run_name all ranks write the same run folder (runs/<job id>)
srun torchrun \
  --nnodes "$SLURM_NNODES" --nproc-per-node "$GPUS_PER_NODE" \
  --rdzv-backend c10d --rdzv-endpoint "$HEAD:$PORT" --rdzv-id "$SLURM_JOB_ID" \
  -m tailrl train "$@"
