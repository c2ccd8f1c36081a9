#!/bin/bash
# The approach of SURF's MPS prolog, rewritten for the benchmark: one
# directory per GPU holding a file per job; the GPU with the fewest files
# wins; no lock, no atomic state. Run with SLURM_JOB_ID set and STATE_DIR
# pointing at the state directory.
set -u
gpus=4
best=0
best_count=999999
for ((i = 0; i < gpus; i++)); do
    mkdir -p "$STATE_DIR/gpu$i"
    count=$(ls "$STATE_DIR/gpu$i" | wc -l)
    if [ "$count" -lt "$best_count" ]; then
        best=$i
        best_count=$count
    fi
done
echo "$SLURM_JOB_USER" > "$STATE_DIR/gpu$best/$SLURM_JOB_ID"
echo "CUDA_VISIBLE_DEVICES=$best" > "$STATE_DIR/job_$SLURM_JOB_ID.env"
