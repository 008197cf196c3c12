"""Exit codes every command shares (docs/reference/exit-codes.md)."""

OK = 0            # verdict ok or warn; command succeeded
UNHEALTHY = 1     # verdict reboot or drain (check); incompatible (compat)
USAGE = 2         # bad option, unreadable or invalid config
NO_STATE = 3      # the input holds no readable GPU state at all (or reading it timed out)

_BAD = "bad option, or an input or config that cannot be used (one line says which)"
_RUN = "the rollout ended done (rolled back: resume, abort, rollback)"
_HALT = "the rollout halted, or a node failed"

# Each command's codes and what each means there: the contract other tools call (docs/reference/exit-codes.md
# is generated from it; tests/test_exit_codes.py holds every command to it).  70 is a bug in any command.
BY_COMMAND: dict[str, dict[int, str]] = {
    "check": {OK: "verdict ok or warn", UNHEALTHY: "verdict reboot or drain", USAGE: _BAD,
              NO_STATE: "no readable GPU state, or reading it timed out"},
    "snapshot": {OK: "written", USAGE: _BAD, NO_STATE: "no readable GPU state, or reading it timed out"},
    "xid": {OK: "read (whatever it holds)", USAGE: _BAD, NO_STATE: "not a kernel log (binary)"},
    "compat": {OK: "compatible", UNHEALTHY: "incompatible", USAGE: _BAD},
    "reboot-check": {OK: "the node may reboot into it", UNHEALTHY: "it may not (one line says why)", USAGE: _BAD},
    "breaker status": {OK: "closed", UNHEALTHY: "open", USAGE: _BAD},
    "fleet repaired": {OK: "every node handed back", UNHEALTHY: "a node was left (one line says why)", USAGE: _BAD},
    "fleet sweep": {OK: "swept", UNHEALTHY: "a job could not be submitted or cancelled", USAGE: _BAD},
    "fleet lemons": {OK: "no node confirmed this step", UNHEALTHY: "a lemon confirmed, or the breaker held it",
                     USAGE: _BAD},
    "fleet stragglers": {OK: "no flag", UNHEALTHY: "flags", USAGE: _BAD, NO_STATE: "no row to judge"},
    "maintain plan": {OK: "a plan", UNHEALTHY: "the gate refuses it (without --force)", USAGE: _BAD},
    "maintain apply": {OK: "every node done", UNHEALTHY: _HALT, USAGE: _BAD},
    "maintain resume": {OK: _RUN, UNHEALTHY: _HALT, USAGE: _BAD},
    "maintain abort": {OK: _RUN, UNHEALTHY: _HALT, USAGE: _BAD},
    "maintain rollback": {OK: _RUN, UNHEALTHY: _HALT, USAGE: _BAD},
}
# every other command: done, or a bad option or input
DEFAULT: dict[int, str] = {OK: "done", USAGE: _BAD}


def of(command: str) -> dict[int, str]:
    """A command's codes (its name as typed after `slurm-gpufleet`: "fleet cases")."""
    return BY_COMMAND.get(command, DEFAULT)
