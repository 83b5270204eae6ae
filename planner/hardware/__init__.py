"""Hardware: GPU and interconnect records, their catalog, and the local GPUs through NVML."""
