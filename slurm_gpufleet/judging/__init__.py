"""Judging a node: the checks (one health domain per module in `checks/`), their findings and
verdict, the pipeline that reads a snapshot and runs them, IMEX judged per job, and the summary a node
publishes to Slurm.  It may import `common`, `catalogs`, `policy` and `readers`; never Slurm, a remedy or
a record."""
