"""Real components on one machine, on loopback ports: a tiny vLLM engine, Prometheus, Alertmanager.

Used by `slokit demo` and by the test suite, so both start the stack the same way.
"""
