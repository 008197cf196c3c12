"""What happened, kept: each node's history (SQLite), the record per job in Slurm's accounting,
Prometheus metrics, the fleet's reliability figures from the histories and the checkpoint advice drawn
from them.  It may import every domain below it (`common` up to `remedy`); nothing above."""
