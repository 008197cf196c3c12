#!/bin/bash
# A validation run for slurm-gpufleet (returning.py): DCGM's diagnostic at level 3 (default) on this
# node's GPUs, as NVIDIA's and HyperPod's validation before return do.  Set in gpufleet.toml:
#   [slurm]
#   validation_command = "/etc/slurm-gpufleet/validation/dcgm-diag.sh"
#   validation_timeout_minutes = 45        # level 3 takes about 30 min on 8 GPUs; level 4 longer
# Exit 0 when every test passed; otherwise exit 1 with the failing lines on stdout, the last of which
# the health check quotes in the node's repair reason.
set -uo pipefail
level=${DCGM_DIAG_LEVEL:-3}
command -v dcgmi >/dev/null || { echo "dcgmi not found: install datacenter-gpu-manager"; exit 1; }
out=$(dcgmi diag -r "$level" 2>&1)
rc=$?
failed=$(printf '%s\n' "$out" | grep -E '\bFail\b' || true)
if [ "$rc" -ne 0 ] || [ -n "$failed" ]; then
  printf '%s\n' "${failed:-dcgmi diag -r $level exited $rc}"
  exit 1
fi
echo "dcgmi diag -r $level: pass"
