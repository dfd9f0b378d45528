"""A fleet-shaped spec: N models, four request classes modelled on examples/assistant.yaml.

What slokit writes must grow with a spec's distinct shapes (classes, SLIs, thresholds, scopes), never with the
number of models. This module writes the specs that claim is measured on (`bench/fleet.py`, the fleet tests and the
rule-cost benchmark's fleet case): the same four classes for any number of models, so two fleets differ only in
how many models serve them.

* `source: slokit`: every model serves every class (slokit's exporter labels requests by class).
* `source: vllm`: vLLM's own metrics carry no class, so the classes are spread over the models (model i serves
  class i mod 4) and every threshold sits on one of vLLM's default bucket boundaries.
"""

from __future__ import annotations

from typing import Final

import yaml

SOURCES: Final = ("slokit", "vllm")
GPUS: Final = ("h100-sxm", "h200", "a100-80gb", "l40s")

_CLASSES: Final = (
    {
        "name": "chat",
        "slos": {
            "ttft": {
                "objective": {"percentile": 95, "threshold": "500ms"},
                "tiers": {
                    "target": {"p50": "250ms", "p95": "500ms"},
                    "acceptable": {"p50": "500ms", "p95": "750ms"},
                    "critical": {"p50": "1s", "p95": "2.5s"},
                },
            },
            "itl": {
                "objective": {"percentile": 95, "threshold": "50ms"},
                "tiers": {"target": {"p95": "50ms"}, "acceptable": {"p95": "75ms"}, "critical": {"p50": "100ms"}},
            },
            "e2e": {"objective": {"percentile": 99, "threshold": "30s"}},
        },
    },
    {
        "name": "code",
        "slos": {
            "ttft": {
                "objective": {"percentile": 99, "threshold": "250ms"},
                "tiers": {
                    "target": {"p50": "100ms"},
                    "acceptable": {"p50": "250ms", "p95": "500ms"},
                    "critical": {"p50": "500ms", "p95": "1s"},
                },
            },
            "tpot": {"objective": {"percentile": 95, "threshold": "25ms"}},
        },
    },
    {
        "name": "agent",
        "slos": {
            "ttft": {
                "objective": {"percentile": 99, "threshold": "1s"},
                "tiers": {"acceptable": {"p95": "1s"}, "critical": {"p50": "2.5s"}},
            },
            "itl": {"objective": {"percentile": 99, "threshold": "100ms"}},
        },
    },
    {
        "name": "batch",
        "slos": {
            "e2e": {
                "objective": {"percentile": 99, "threshold": "60s"},
                "tiers": {"acceptable": {"p50": "20s", "p99": "60s"}, "critical": {"p50": "60s"}},
                "consistency": {"max_p99_over_p50": 2.5},
            },
            "ttft": {"objective": {"percentile": 90, "threshold": "5s"}},
        },
    },
)


def model_names(models: int) -> list[str]:
    """`model-00`, `model-01`, ...: names of equal length, so bytes compare fairly across fleet sizes."""
    return [f"model-{index:02d}" for index in range(models)]


def fleet_spec(models: int, source: str = "slokit", classes: int = 4, service: str = "fleet") -> dict[str, object]:
    """The spec as plain data (see the module docstring); `classes` of the four, or more (copies of the four under
    new names, for specs with many classes)."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, not {source!r}")
    if models < 1 or classes < 1:
        raise ValueError("a fleet has at least one model and one class")
    names = model_names(models)
    model_list = [
        {"name": name, "gpu": GPUS[index % len(GPUS)], "tensor_parallel": 8 if index % 3 == 0 else 1,
         "max_num_seqs": 256 if index % 2 == 0 else 128}
        for index, name in enumerate(names)
    ]  # fmt: skip
    class_list: list[dict[str, object]] = []
    for index in range(classes):
        base = _CLASSES[index % len(_CLASSES)]
        name = str(base["name"]) if index < len(_CLASSES) else f"{base['name']}-{index // len(_CLASSES)}"
        entry: dict[str, object] = {"name": name, "slos": base["slos"]}
        if source == "vllm":
            served = [n for i, n in enumerate(names) if i % classes == index] or [names[index % models]]
            entry["models"] = served
        class_list.append(entry)
    spec: dict[str, object] = {
        "version": "slokit/v1",
        "service": service,
        "description": f"A fleet of {models} models and {classes} request classes.",
        "source": source,
        "window": "28d",
        "selector": {"namespace": "prod", "job": "vllm"},
        "models": model_list,
        "classes": class_list,
        "alerting": {
            "severity": {"page": "critical", "ticket": "warning"},
            "runbook_url": "https://runbooks.example.com/{service}#{alert}",
        },
    }
    if source == "vllm":
        spec["vllm"] = {"version": "0.32"}
    return spec


def fleet_spec_yaml(models: int, source: str = "slokit", classes: int = 4, service: str = "fleet") -> str:
    """The spec as YAML text, ready for `slokit validate` and `slokit generate`."""
    header = f"# A fleet-shaped spec written by slokit.fleet: {models} models, {classes} classes, source {source}.\n"
    return header + yaml.safe_dump(fleet_spec(models, source, classes, service), sort_keys=False, width=120)
