"""Exit codes every command shares (docs/reference/exit-codes.md)."""

OK = 0            # verdict ok or warn; command succeeded
UNHEALTHY = 1     # verdict reboot or drain (check); incompatible (compat)
USAGE = 2         # bad option, unreadable or invalid config
NO_STATE = 3      # the input holds no readable GPU state at all (or reading it timed out)
