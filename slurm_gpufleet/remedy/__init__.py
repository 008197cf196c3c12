"""A node's remedies, as `maintain/` is a rollout's: the states and moves (table.py), the pure decision
(decide.py) and the one carrier of its effects through the actuator (carrier.py), which the health
check, the prolog, the epilog and the fault simulator all run."""
