"""Fixtures: Prometheus, promtool and Alertmanager binaries started on loopback ports."""
