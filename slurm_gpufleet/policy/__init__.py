"""Health-check policy: safe defaults, a site file in TOML, per-node-group overrides; and what root may
trust of the paths it names (`trust`).  It may import `common` and `catalogs` alone.

    [defaults]                      # applies to every node
    require_persistence = true

    [[group]]                       # later groups override earlier ones, key by key
    name = "h200"
    nodes = "gpu[001-128]"          # a Slurm host list, parsed by ClusterShell's NodeSet
    expected_gpus = 8
    driver_version = "580.159.04"

    [models."NVIDIA B200"]          # extends data/gpu_models.toml
    match = "\\bB200\\b"
    max_sm_mhz = 1965

Unknown keys and bad values are errors that name the file and line: a broken config must never
produce verdicts (and so never drain a fleet).
"""

from __future__ import annotations

from .loading import (  # noqa: F401  (as callers name them)
    EMPTY_CONFIG_REREAD_S,
    _KeyLines,
    _site_section,
    load_policy,
    parse_policy,
)
from .settings import (  # noqa: F401  (as callers name them)
    MAINTAIN_VALIDATORS,
    SLURM_VALIDATORS,
    VALIDATORS,
    BundleSpec,
    DomainSpec,
    MaintainSettings,
    NodePolicy,
    Policy,
    Requirement,
    SlurmSettings,
    config_path,
    default_policy,
)
from .slurm_conf import slurm_conf_features, slurm_conf_nodes  # noqa: F401  (as callers name them)
from .values import (  # noqa: F401  (as callers name them)
    DEFAULT_PATH,
    ENV_VAR,
    SEVERITY_CHOICES,
    SIGNALS,
    PolicyError,
    parse_budget,
)
