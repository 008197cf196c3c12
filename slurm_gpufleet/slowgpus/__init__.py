"""Slow GPUs: the node's own probe results across the fleet, and inside a running job the sampler,
the telemetry judge (instep), the timings judge and the lemon record that turns repeated in-job flags into
a case.  It may import every domain below it (`common` up to `records`); nothing above."""
