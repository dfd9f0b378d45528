"""Real components on one machine, on loopback ports: a tiny vLLM engine, Prometheus, Alertmanager, and the
emulator (an OpenAI-compatible server with a known latency model, for the probe's tests and benchmarks).

Used by `slokit demo`, the test suite and the benchmarks, so all of them start local processes the same way.
"""
