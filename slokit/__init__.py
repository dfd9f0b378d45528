"""slokit: latency SLOs for LLM serving, from one spec."""

__version__ = "0.1.0"
