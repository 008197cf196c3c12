"""The prolog's success path: no Slurm round-trip, no database, no heavy imports; bad config never acts."""

import json
import os
import subprocess
import sys

from support import REPO

from slurm_gpufleet.slurm.ownership import owner_of_reason

sys.path.insert(0, str(REPO / "tests" / "slurm"))
import gpustate  # noqa: E402

PROBE = """
import os, sys, time
t = time.perf_counter()
from slurm_gpufleet.hooks import prolog_main
rc = prolog_main()
print(json.dumps({"rc": rc, "s": time.perf_counter() - t,
                  "heavy": [m for m in ("click", "jinja2", "sqlite_utils") if m in sys.modules],
                  "parsers": [m for m in ("slurm_gpufleet.readers.smi_text", "slurm_gpufleet.readers.smi_xml",
                                          "importlib.resources") if m in sys.modules]}))
"""


# the node's GPUs: pynvml on the path is the recorded-NVML one (tests/fake_pynvml/recorded)
FAKE_NVML = str(REPO / "tests" / "fake_pynvml" / "recorded")


def _config(tmp_path, gpus_dir, extra=""):
    cfg = tmp_path / "gpufleet.toml"
    cfg.write_text(f"""[slurm]
scontrol = "/nonexistent/scontrol"
state_dir = "{tmp_path}/state"
kernel_log = "{gpus_dir}"
{extra}""")
    return cfg


def _node_env(gpus_dir, **extra):
    return {"SLURMD_NODENAME": "n9", "PYTHONPATH": f"{FAKE_NVML}:{REPO}", "GPUFLEET_FAKE_NVML_DIR": str(gpus_dir),
            **extra}


def _run_prolog(tmp_path, cfg, job_gpus="0,1"):
    env = _node_env(tmp_path / "gpus", SLURM_JOB_ID="42", SLURM_JOB_GPUS=job_gpus, SLURM_GPUFLEET_CONFIG=str(cfg))
    return subprocess.run([sys.executable, "-c", "import json\n" + PROBE], capture_output=True, text=True, env=env,
                          timeout=60)


def test_prolog_success_path_is_light(tmp_path):
    gpus = tmp_path / "gpus"
    gpus.mkdir()
    gpustate.write_atomic(gpustate.healthy_state(8, "n9"), str(gpus / "n9.json"))
    r = _run_prolog(tmp_path, _config(tmp_path, gpus))
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["rc"] == 0 and out["heavy"] == [], r.stderr
    # nor the saved-report parsers or importlib.resources (12 ms of every hook's start between them)
    assert out["parsers"] == [], out
    # no database on the success path (the scontrol path does not even exist), only the job window file
    assert not list((tmp_path / "state").glob("*.db"))
    window = json.loads((tmp_path / "state" / "jobs" / "n9.42.json").read_text())
    assert window["gpus"] == [0, 1] and set(window["counters"]) == {"0", "1"}


def test_prolog_fails_on_a_fault_in_the_jobs_gpus(tmp_path):
    gpus = tmp_path / "gpus"
    gpus.mkdir()
    gpustate.write_atomic(gpustate.healthy_state(8, "n9"), str(gpus / "n9.json"))
    gpustate.add_process(str(gpus / "n9.json"), 1, pid=99)
    r = _run_prolog(tmp_path, _config(tmp_path, gpus), job_gpus="0,1")
    assert "processes gpu1 1 leftover GPU process(es) [gpufleet]" in r.stdout
    assert json.loads(r.stdout.strip().splitlines()[-1])["rc"] == 1
    # a process on a GPU the job did not get is not the prolog's business
    r = _run_prolog(tmp_path, _config(tmp_path, gpus), job_gpus="2,3")
    assert json.loads(r.stdout.strip().splitlines()[-1])["rc"] == 0


def test_broken_config_never_fails_the_prolog(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(f'[slurm]\nstate_dir = "{tmp_path}/state"\nclean_runs = 2\n')
    r = _run_prolog(tmp_path, cfg)
    assert json.loads(r.stdout.strip().splitlines()[-1])["rc"] == 0
    assert "ALERT gpufleet config error, running on the packaged defaults in observe mode" in r.stderr
    assert f"{cfg}:3: unknown key 'clean_runs'" in r.stderr


def test_nhc_mode_judges_only(tmp_path):
    gpus = tmp_path / "gpus"
    gpus.mkdir()
    gpustate.write_atomic(gpustate.healthy_state(2, "n9"), str(gpus / "n9.json"))
    cfg = _config(tmp_path, gpus)
    env = _node_env(gpus, SLURM_GPUFLEET_CONFIG=str(cfg))
    exe = [sys.executable, str(REPO / "healthcheck" / "slurm-gpufleet-healthcheck"), "--nhc", "--node", "n9"]
    assert subprocess.run(exe, env=env, capture_output=True, timeout=60).returncode == 0
    gpustate.fault(str(gpus / "n9.json"), 1, "row_remap_failure")
    r = subprocess.run(exe, env=env, capture_output=True, text=True, timeout=60)
    # NHC drains with its own reason around these words: the drain is NHC's, so they carry no mark of ours
    assert r.returncode == 1 and r.stdout.strip() == "memory gpu1 row remapping failed"
    assert owner_of_reason(f"NHC: check_gpufleet: {r.stdout.strip()}") == "other"
    assert not os.path.exists(tmp_path / "state" / "n9.db")


def test_the_epilog_ends_its_jobs_sampler_even_when_the_config_is_broken(tmp_path):
    """The sampler never outlives its job: the epilog ends it before it reads any config (a config it
    cannot parse used to return first, leaving the sampler to publish for days)."""
    import time

    cfg = tmp_path / "broken.toml"
    cfg.write_text(f'[slurm\\n\nstate_dir = "{tmp_path}/state"\n')
    # a process with the sampler's command line (sampler.start): code naming sampler_main, then JOB NODE
    sampler = subprocess.Popen([sys.executable, "-c", "import time  # sampler_main\ntime.sleep(120)", "42", "n9"])
    other = subprocess.Popen([sys.executable, "-c", "import time  # sampler_main\ntime.sleep(120)", "43", "n9"])
    try:
        time.sleep(0.3)
        env = _node_env(tmp_path / "gpus", SLURM_JOB_ID="42", SLURM_GPUFLEET_CONFIG=str(cfg))
        r = subprocess.run([sys.executable, "-c", "import sys; from slurm_gpufleet.hooks import epilog_main; "
                            "sys.exit(epilog_main())"], capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 0 and "config error" in r.stderr, r.stderr
        assert sampler.wait(timeout=10) is not None
        assert other.poll() is None, "another job's sampler was left alone"
    finally:
        for p in (sampler, other):
            p.kill()
            p.wait()


def test_the_recorded_nvml_fails_a_call_not_a_lookup_when_the_driver_changes_mid_read(tmp_path):
    """tests/fake_pynvml/recorded re-reads the node's state when it changed (the in-job sampler sees a
    fault as it happens).  A bad driver written while a health check reads must fail the reader's next
    guarded call, as real NVML would, never the lookup before it: the live reader then reports the driver
    mismatch instead of an internal error."""
    code = """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import gpustate, pynvml
from slurm_gpufleet.readers.nvml import NvmlReader
state = os.path.join(os.environ["GPUFLEET_FAKE_NVML_DIR"], "n9.json")
pynvml.nvmlInit()
time.sleep(0.01)
gpustate.write_atomic(gpustate.driver_mismatch("580.159.04"), state)
getter = pynvml.nvmlDeviceGetCount  # a lookup: no NVML error
try:
    getter()
    raised = None
except pynvml.NVMLError as exc:
    raised = exc.value
class Midway:  # the reader's read, with the bad driver written after its first call
    def __init__(self):
        self.calls = 0
    def __getattr__(self, name):
        fn = getattr(pynvml, name)
        def call(*args):
            self.calls += 1
            if self.calls == 2:
                gpustate.write_atomic(gpustate.driver_mismatch("580.159.04"), state)
            return fn(*args)
        return call
gpustate.write_atomic(gpustate.healthy_state(8, "n9"), state)
snap = NvmlReader(nvml=Midway()).read()
print(json.dumps({"raised": raised, "gpus": len(snap.gpus)}))
"""
    gpus = tmp_path / "gpus"
    gpus.mkdir()
    gpustate.write_atomic(gpustate.healthy_state(8, "n9"), str(gpus / "n9.json"))
    r = subprocess.run([sys.executable, "-c", code, str(REPO / "tests" / "slurm")], capture_output=True, text=True,
                       env={**os.environ, **_node_env(gpus)}, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["raised"] == 18  # NVML_ERROR_LIB_RM_VERSION_MISMATCH, from the call
    assert out["gpus"] == 0  # the read went on, every later call failing as NVML does; no exception left it
