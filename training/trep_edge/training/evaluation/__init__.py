"""The paper's downstream protocols (TREP.md §5), each in its own module, and the runner that fills the results table.

Every evaluation trains two encoders on identical data, splits, seed and budget: T-Rep and its TS2Vec ablation
(no time-embedding, task weights 0.5/0.5/0/0). Anomaly scores go through ``runtime.scoring`` and
``runtime.offline``, the daemon's own code; the paper's alert rule on top of them (threshold, delay) is
``paper_protocol``, which the product never applies.
"""
