"""Autoscaling replay: how each scaling policy would have served a request history, and what it would cost.

`history` reads the traffic, `engine` models one vLLM engine, `replay` runs a pool of them under a controller,
`hpa` is the Kubernetes HPA's decision, `policies` the policies compared, `sizing` the engine's capacity at the
SLO, `compare` runs them side by side and `report` scores and writes them (docs/autoscale.md).
"""
