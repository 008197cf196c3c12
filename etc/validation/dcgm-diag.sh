#!/bin/bash
# A validation run for slurm-gpufleet (returning.py) with DCGM's diagnostic at level 3 (default), as
# NVIDIA's and HyperPod's validation before return do.  Set in gpufleet.toml:
#   [slurm]
#   validation_command = "/etc/slurm-gpufleet/validation/dcgm-diag.sh"
#   validation_timeout_minutes = 45        # level 3 takes about 30 min on 8 GPUs; level 4 longer
#   dcgm_timeout_s = 2400                  # dcgmi itself past this: DCGM's fault, not the GPUs'
# (or, the same without this file: dcgm_diag_level = 3 and the default validation_command).
# The deep check runs `dcgmi diag -r LEVEL -j` and reads it as data (checks/dcgm.py): exit 0 when the
# GPUs pass; 1 with the failing test on stdout (a GPU's failed test, by the severity DCGM gives it), which
# the health check quotes in the node's repair reason; 75 when DCGM itself could not judge the GPUs (dcgmi
# missing, hung, its host engine unreachable or of another version): the validation is then `unverified`.
set -uo pipefail
level=${DCGM_DIAG_LEVEL:-3}
hc=${GPUFLEET_HEALTHCHECK:-/usr/local/sbin/slurm-gpufleet-healthcheck}
[ -x "$hc" ] || { echo "$hc not found: set GPUFLEET_HEALTHCHECK to the installed slurm-gpufleet-healthcheck"; exit 75; }
exec "$hc" --level deep --nhc --dcgm-level "$level"
