"""The runtime's service shell around the core: daemon loop, MQTT, payloads, messages, checkpoints, config, HTTP,
archive, replay and resharding (docs/architecture.md)."""
