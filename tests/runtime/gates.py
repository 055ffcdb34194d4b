"""Detector settings some tests pin, because their faults and severities were sized on that detector's scale."""

GAUSSIAN_GATE = dict(tail_dof=0, threshold=5.0, record_cap=9.0, record_decay=0.003, peak_decay=0.01)
"""The detector before the Student-t tail: a Gaussian tail with the gate settings measured for it."""
