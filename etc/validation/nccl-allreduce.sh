#!/bin/bash
# A validation run for slurm-gpufleet (returning.py): an NCCL all-reduce over this node's GPUs with a
# bus-bandwidth floor (nccl-tests' all_reduce_perf).  On an NVL72 rack, where the NVLink domain spans
# the rack's trays, run it with srun over the domain's nodes in their reservation instead.
#   [slurm]
#   validation_command = "/etc/slurm-gpufleet/validation/nccl-allreduce.sh"
# NCCL_MIN_BUSBW_GBPS: the floor in GB/s for the largest size (set it from a healthy node of the same
# model: an 8-GPU H100/H200 board with NVSwitch gives several hundred GB/s).
set -uo pipefail
floor=${NCCL_MIN_BUSBW_GBPS:-300}
gpus=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
exe=${ALL_REDUCE_PERF:-all_reduce_perf}
# 75: the tool is missing, nothing was judged (the node's validation is `unverified`, never failed)
command -v "$exe" >/dev/null || { echo "$exe not found: build nccl-tests"; exit 75; }
out=$("$exe" -b 1G -e 4G -f 2 -g "$gpus" 2>&1) || { printf '%s\n' "$out" | tail -n 3; exit 1; }
# the last data row: size count type redop root time algbw busbw #wrong (out of place) ...
busbw=$(printf '%s\n' "$out" | awk '$1 ~ /^[0-9]+$/ && NF >= 8 {bw = $8} END {print bw}')
if [ -z "$busbw" ] || awk -v b="$busbw" -v f="$floor" 'BEGIN {exit !(b < f)}'; then
  echo "all-reduce bus bandwidth ${busbw:-unreadable} GB/s < ${floor} GB/s on $gpus GPUs"
  exit 1
fi
echo "all-reduce bus bandwidth $busbw GB/s >= $floor GB/s on $gpus GPUs: pass"
