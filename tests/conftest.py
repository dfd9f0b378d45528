"""Shared fixtures. Real components (one vLLM engine, Prometheus) are session-scoped and live in their own plugin
modules so each stays owned by one place."""

pytest_plugins = ["tests.fixtures_vllm", "tests.fixtures_prometheus"]
