"""Built-in model and GPU presets, named as the spec's `gpu` and `preset` fields name them.

Plain data only (nothing imported from the rest of slokit), so the spec loader can validate names against it.
"""

from __future__ import annotations

from typing import Final

GPU_NAMES: Final = frozenset({"h100-sxm", "h100-pcie", "h200", "a100-40gb", "a100-80gb", "l40s"})
MODEL_NAMES: Final = frozenset({"llama-3-8b", "llama-3-70b", "qwen2-72b", "mixtral-8x7b"})
