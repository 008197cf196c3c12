"""A stand-in `scontrol` for one node, n9: it logs each invocation (calls.jsonl beside it) and keeps the
node's state in node.json as slurmctld would, so a health check can be run against it repeatedly and its
Slurm processes counted (tests/test_slurm_calls.py, bench/check_speed.py).  tests/fake_slurm/node.py
copies it into a folder of the test's, with the running Python as its interpreter."""

import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
argv = sys.argv[1:]
with open(os.path.join(here, "calls.jsonl"), "a") as fh:
    fh.write(json.dumps(argv) + "\n")
state_file = os.path.join(here, "node.json")
node = json.load(open(state_file)) if os.path.exists(state_file) else {"state": "IDLE", "reason": "", "extra": ""}
if argv == ["--version"]:
    print("slurm 22.05.8")
elif argv[:1] == ["show"]:
    state = node["state"] + ("+DRAIN" if node.get("drain") else "")
    reason = f"   Reason={node['reason']} [root@2026-12-01T08:00:00]\n" if node["reason"] else ""
    print(f"NodeName=n9 Arch=x86_64 CoresPerSocket=1\n   State={state} ThreadsPerCore=1 Weight=1\n"
          f"   Gres={node.get('gres', 'gpu:h200:8')}\n   Partitions=gpu\n   BootTime=2026-12-01T07:00:00 SlurmdStartTime=2026-12-01T07:00:05\n"
          f"   AvailableFeatures={node.get('availablefeatures', '')}\n"
          f"   ActiveFeatures={node.get('activefeatures', '')}\n"
          f"{reason}   Extra={node['extra']}\n")
elif argv[:1] == ["update"]:
    for arg in argv[2:]:
        key, _, value = arg.partition("=")
        if key == "state":
            node["drain"] = value == "drain"
        elif key in ("reason", "extra", "availablefeatures", "activefeatures"):
            node[key] = value
    json.dump(node, open(state_file, "w"))
