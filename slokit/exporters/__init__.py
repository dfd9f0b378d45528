"""Exporters: slokit's stat-logger plugin inside vLLM (`vllm.py`, the only module that imports vllm) with its
vllm-free helpers (`classes.py`), and the NVML GPU sidecar.
"""
