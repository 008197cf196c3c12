"""What slurmd runs: the health check, the prolog and the epilog (and the in-job sampler the prolog starts).

Each reads the node's GPUs under a hard time limit, judges them with the same checks as
`slurm-gpufleet check`, and acts through Slurm (slurm/actions.py decides, slurm/actuator.py writes).
One module an entry point: healthcheck.py, prolog.py, epilog.py; what they share is in common.py, what
the prolog leaves for the epilog in jobs.py.  This module only dispatches, and imports nothing heavy:
slurmd starts a health check every interval on every node.
"""

from __future__ import annotations


def healthcheck_main(argv: list[str] | None = None) -> int:
    from .common import _guarded
    from .healthcheck import run

    return _guarded("healthcheck", run, argv)


def prolog_main(argv: list[str] | None = None) -> int:
    from .common import _guarded
    from .prolog import run

    return _guarded("prolog", run, argv)


def epilog_main(argv: list[str] | None = None) -> int:
    from .common import _guarded
    from .epilog import run

    return _guarded("epilog", run, argv)


def sampler_main(argv: list[str]) -> int:
    """The in-job sampler the prolog starts (sampler.py): JOB NODE."""
    from .common import _guarded

    return _guarded("sampler", _sampler, argv)


def _sampler(argv: list[str]) -> int:
    import os

    from ..slowgpus import sampler
    from .common import _backend, _setup

    job, node = argv[0], argv[1]
    setup = _setup("sampler", None, node, job)
    if setup is None:
        return 0
    import pynvml

    from ..readers.jobgpus import job_gpu_ids
    from .quiet import fleet_size, read_every

    conf = os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    return sampler.loop(setup.settings, _backend(setup.settings), pynvml, job, node, gpus=job_gpu_ids(os.environ),
                        fleet_nodes=fleet_size(setup.settings.state_dir, conf), kept_for_s=read_every(setup.settings))
