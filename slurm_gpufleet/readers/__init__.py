"""Reading a node's GPU state into a NodeSnapshot (`snapshot`): live NVML or its replay, nvidia-smi
output, our JSON (`report`), the kernel log, sysfs and the host, DCGM, InfiniBand, the short performance
probe, and which GPUs are a job's (`jobgpus`).  It may import `common`, `catalogs` and `policy`; it judges
nothing and writes nothing."""
