"""Staged driver upgrades between jobs: fleet view, planner, durable rollout state machine."""
