"""Slow-GPU detection: short measurements on the node, robust statistics across the fleet."""
