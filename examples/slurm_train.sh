#!/bin/bash
# Multi-node GRPO/DAPO training with SLURM: one torchrun agent per node, one rank per GPU, FSDP2 inside.
#   sbatch examples/slurm_train.sh examples/gsm8k.yaml model.path=/models/Qwen2.5-1.5B-Instruct data.source=/data/gsm8k/train.jsonl
# Resume a run by hand (same node and GPU counts: the optimizer is saved in one shard per rank):
#   sbatch examples/slurm_train.sh --resume runs/gsm8k
#
# Preemption-safe: 300 s before the time limit SLURM sends SIGUSR1 to this script (--signal=B:USR1@300),
# which forwards SIGTERM to the ranks (srun -> torchrun -> every rank). They finish the current step (a rollout
# that would run past train.stop_grace_s is abandoned and rolled back), checkpoint it on every rank and exit 75;
# then the job requeues itself and, run again under the same job id, continues with --resume RUN_DIR. The
# result is bitwise the uninterrupted run's. A plain scancel (SIGTERM) stops the ranks the same way, without a
# requeue. train.out_dir must be on a filesystem every node sees (checkpoint shards are written by every rank).
#SBATCH --job-name=tailrl
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=32
#SBATCH --time=24:00:00
#SBATCH --output=%x-%j.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --signal=B:USR1@300
set -euo pipefail

GPUS_PER_NODE=${SLURM_GPUS_ON_NODE:-8}
HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
PORT=${PORT:-29500}
RUN_DIR=${RUN_DIR:-runs/$SLURM_JOB_ID}  # a requeued job keeps its id, so it finds its run again
STOP_GRACE=${STOP_GRACE:-240}           # < the 300 s of --signal above, less a checkpoint's time
# torchrun kills its ranks this long after forwarding the stop (its default, 30 s, is too short here)
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=${TORCH_ELASTIC_SHUTDOWN_TIMEOUT:-$((STOP_GRACE + 50))}

GRACE="train.stop_grace_s=$STOP_GRACE"
if [ "${1:-}" = "--resume" ]; then
  ARGS=("$@" "$GRACE")                          # resumed by hand
elif [ -f "$RUN_DIR/config.yaml" ]; then
  ARGS=(--resume "$RUN_DIR" "$GRACE")           # requeued: continue this job's run from its last checkpoint
else
  ARGS=("$@" "$GRACE" --run-dir "$RUN_DIR")
fi

REQUEUE=0
stop_and_requeue() {
  echo "tailrl: SIGUSR1 (time limit near): the ranks stop at the step boundary, then the job requeues" >&2
  REQUEUE=1
  kill -TERM "$SRUN_PID" 2>/dev/null || true  # srun forwards it to the torchrun agents, they to every rank
}
trap stop_and_requeue USR1

# every agent meets the others at the first node (c10d rendezvous), named by the job id
srun torchrun \
  --nnodes "$SLURM_NNODES" --nproc-per-node "$GPUS_PER_NODE" \
  --rdzv-backend c10d --rdzv-endpoint "$HEAD:$PORT" --rdzv-id "$SLURM_JOB_ID" \
  -m tailrl train "${ARGS[@]}" &
SRUN_PID=$!
while :; do  # a trapped signal ends `wait` early: wait again until srun is gone
  RC=0
  wait "$SRUN_PID" || RC=$?
  kill -0 "$SRUN_PID" 2>/dev/null || break
done

if [ "$REQUEUE" = 1 ]; then
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$RC"
