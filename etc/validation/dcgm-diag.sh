#!/bin/bash
# A validation run for slurm-gpufleet (returning.py): DCGM's diagnostic at level 3 (default) on this
# node's GPUs, as NVIDIA's and HyperPod's validation before return do.  Set in gpufleet.toml:
#   [slurm]
#   validation_command = "/etc/slurm-gpufleet/validation/dcgm-diag.sh"
#   validation_timeout_minutes = 45        # level 3 takes about 30 min on 8 GPUs; level 4 longer
# Exit 0 when every test passed; 1 with the failing lines on stdout, the last of which the health check
# quotes in the node's repair reason; 75 when DCGM itself could not judge the GPUs (dcgmi missing, hung
# past DCGM_DIAG_TIMEOUT_S, its host engine unreachable or of another version): the node's validation is
# then `unverified`, never a failure of its GPUs.
set -uo pipefail
level=${DCGM_DIAG_LEVEL:-3}
limit=${DCGM_DIAG_TIMEOUT_S:-2400}
command -v dcgmi >/dev/null || { echo "dcgmi not found: install datacenter-gpu-manager"; exit 75; }
out=$(timeout "$limit" dcgmi diag -r "$level" 2>&1)
rc=$?
if [ "$rc" -eq 124 ]; then
  echo "dcgmi diag -r $level still running after $limit s: is nv-hostengine hung?"
  exit 75
fi
failed=$(printf '%s\n' "$out" | grep -E '\bFail\b' || true)
if [ -z "$failed" ] && [ "$rc" -ne 0 ] && printf '%s\n' "$out" | grep -qiE 'host ?engine|connect|version'; then
  printf '%s\n' "$out" | grep -iE 'host ?engine|connect|version' | tail -n 1
  exit 75
fi
if [ "$rc" -ne 0 ] || [ -n "$failed" ]; then
  printf '%s\n' "${failed:-dcgmi diag -r $level exited $rc}"
  exit 1
fi
echo "dcgmi diag -r $level: pass"
