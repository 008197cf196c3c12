"""A rollout's plan, as `maintain plan` writes it and `apply` follows it: waves, budget, gate, each node's
slot.  Data only; maintain/planner.py makes one."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..catalogs.bundle import Bundle, firmware_for

INF = float("inf")


class PlanError(ValueError):
    """The request cannot be planned (unknown nodes, bad target); one line."""


@dataclass
class Wave:
    index: int
    kind: str                    # "canary" or "wave"
    nodes: list[str]
    # from its nodes' slots (schedule.node_slots, what `apply` reserves): the first slot, the last slot's
    # end (inf: a node runs a job without a time limit, so when it is free is unknown)
    reserve_at: float
    start: float
    end: float
    partitions: dict[str, int] = field(default_factory=dict)


@dataclass
class Budget:
    """What a rollout may hold out of service at once, and the failures it tolerates: `maintain plan` shows
    it and `apply` obeys it (maintain/schedule.py), whatever the config says since."""
    max_unavailable: int = 0                 # nodes
    per_partition: dict[str, int] = field(default_factory=dict)
    # failed nodes before the rollout halts; None: a plan from before the budget carried it (the config's)
    max_failures: int | None = None
    whole_domain: bool = False               # a failure domain goes whole, in one slot
    max_unavailable_domains: int = 0         # 0: no domain cap
    keep_free_domains: int = 0
    domains_at_once: int | None = None       # a plan of whole domains: how many at once (no partition cap)

    @property
    def by_domain(self) -> bool:
        """Whether the window takes failure domains as units (whole, or under a domain budget)."""
        return bool(self.whole_domain or self.max_unavailable_domains or self.keep_free_domains)


@dataclass
class Plan:
    id: str
    created: float
    target_driver: str | None   # None: the bundle leaves each node's driver as it is
    strategy: str
    node_count: int
    budget: Budget
    gate: dict[str, dict[str, Any]]
    forced: bool
    refused: bool
    waves: list[Wave] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    gating_jobs: list[dict[str, Any]] = field(default_factory=list)
    previous_drivers: dict[str, str | None] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)
    assumptions: dict[str, Any] = field(default_factory=dict)
    deadline: dict[str, Any] | None = None   # maintain/deadline.py: the jobs at risk and what is done to each
    # node -> [slot start, slot end] (epoch s): when `apply` takes it at the latest (its maintenance
    # reservation begins), from schedule.node_slots, the function the engine schedules with
    slots: dict[str, list[float]] = field(default_factory=dict)
    # node -> the running job that decides its slot, and when that job ends by its limit
    decided_by: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the rest of the bundle moved in the same drain (catalogs/bundle.py)
    target_kernel: str | None = None
    target_firmware: dict[str, str] = field(default_factory=dict)
    # node -> its bundle before the rollout ({"driver", "kernel", "firmware"}): what rollback returns to
    previous: dict[str, dict[str, Any]] = field(default_factory=dict)
    # failure domains (NVLink racks, Slurm blocks): name -> nodes, and where they were read from
    domains: dict[str, list[str]] = field(default_factory=dict)
    domains_from: str | None = None
    # domain -> {"state": planned | skipped | waits, "why"}: whole domains and members held by others
    domain_states: dict[str, dict[str, str]] = field(default_factory=dict)
    # firmware per GPU model (`--target-firmware MODEL:COMPONENT=VERSION`), over `target_firmware`; and the
    # model of each planned node, to pick it
    firmware_by_model: dict[str, dict[str, str]] = field(default_factory=dict)
    node_models: dict[str, str] = field(default_factory=dict)

    @property
    def target(self) -> Bundle:
        return Bundle(self.target_driver, self.target_kernel, dict(self.target_firmware))

    def target_for(self, node: str) -> Bundle:
        """What this node moves to: the target, with its GPU model's firmware."""
        if not self.firmware_by_model:
            return self.target
        fw = firmware_for(self.node_models.get(node), self.firmware_by_model) or {}
        return Bundle(self.target_driver, self.target_kernel, {**self.target_firmware, **fw})

    def previous_bundle(self, node: str) -> Bundle:
        """The node's recorded bundle; a plan from before bundles recorded its driver alone."""
        if node in self.previous:
            return Bundle.from_dict(self.previous[node])
        return Bundle(self.previous_drivers.get(node))

    @property
    def makespan_s(self) -> float:
        return (self.waves[-1].end - self.created) if self.waves else 0.0

    def headline(self) -> str:
        """What the plan rolls out and on how many nodes: those its waves touch (a per-model firmware plan
        leaves the other models out), with the ones left out counted."""
        what = self.target.named() if not self.target.empty else (
            "firmware for " + ", ".join(sorted(self.firmware_by_model)) if self.firmware_by_model else "nothing")
        touched = len({n for w in self.waves for n in w.nodes})
        left = self.node_count - touched
        return f"{what} on {touched} node(s)" + (f" ({left} of the {self.node_count} selected left out)" if left else "")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for w in data["waves"]:
            for k in ("reserve_at", "start", "end"):
                if w[k] == INF:
                    w[k] = None
        wave_of = {n: w.index for w in self.waves for n in w.nodes}
        # one line per node, for tools: when it is taken and which job decides it (derived; not read back)
        # `stage`: the engine's gate stage, the wave's index (the canary's is 0): the window takes a stage's
        # nodes only once every node of the stages before it is settled
        data["nodes"] = [{"node": n, "wave": wave_of.get(n), "stage": wave_of.get(n), "slot_start": start,
                          "slot_end": end, "decided_by": self.decided_by.get(n)}
                         for n, (start, end) in sorted(self.slots.items(), key=lambda kv: (kv[1][0], kv[0]))]
        # failure domains, for tools: each with its nodes, and whether it goes (and why not)
        states = data.pop("domain_states")
        data["domains"] = [{"name": d, "nodes": nodes, **states.get(d, {"state": "planned", "why": ""})}
                           for d, nodes in self.domains.items()]
        return {"plan_version": 1, **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        if not isinstance(data, dict):
            raise PlanError(f"not a slurm-gpufleet plan: a JSON object is expected, this is a {type(data).__name__}")
        if data.get("plan_version") != 1:
            raise PlanError("not a slurm-gpufleet plan (plan_version 1)")
        data = {k: v for k, v in data.items() if k not in ("plan_version", "nodes")}
        from ..common.shapes import check_fields

        try:
            if isinstance(data.get("domains"), list):  # written as a list, read back as name -> nodes
                listed = data.pop("domains")
                data["domains"] = {d["name"]: d["nodes"] for d in listed}
                data["domain_states"] = {d["name"]: {"state": d["state"], "why": d["why"]} for d in listed}
            if not isinstance(data.get("waves"), list):
                raise TypeError("waves: expected a list")
            waves = []
            for i, w in enumerate(data.pop("waves")):
                # an open end (a job without a time limit) is written null: inf again here
                w = {**w, **{k: (INF if w.get(k, 0) is None else w.get(k)) for k in ("reserve_at", "start", "end")}} \
                    if isinstance(w, dict) else w
                check_fields(f"waves[{i}]", {k: (0.0 if v == INF else v) for k, v in w.items()} if isinstance(w, dict)
                             else w, Wave, "index")
                waves.append(Wave(**w))
            check_fields("budget", data.get("budget"), Budget, "max_unavailable")
            budget = Budget(**data.pop("budget"))
            check_fields("plan", {**data, "budget": budget, "waves": waves}, cls, "id")
            odd = next((n for n, slot in data.get("slots", {}).items() if len(slot) != 2), None)
            if odd is not None:
                raise ValueError(f"slots ({odd!r}): not [start, end]")
            return cls(**data, budget=budget, waves=waves)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:  # a plan of another shape: where
            raise PlanError(f"not a slurm-gpufleet plan: {exc}") from None
