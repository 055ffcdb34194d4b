"""The runtime's pure core: no threads, no network, no files but the model's; the same code scores offline and in
the daemon (docs/architecture.md)."""
