"""trep-edge: edge anomaly monitoring for sensor streams with T-Rep representations."""

__version__ = "0.1.0"
