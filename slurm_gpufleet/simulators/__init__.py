"""What-if runs over the in-memory Slurm (simslurm): fleet failures and what the checks save
(faultsim, also on a site's own fault log), and rollouts on a job history (rollout, trials, plots).  They
run the product's own carrier and engine, never a copy of a rule.  It may import every domain below it
(`common` up to `maintain`); only `hooks`, the CLI and the package root import it."""
