"""The registry of signal sources: a spec's `source:` value -> the module that knows that source.

Every built-in source registers here on import; a plugin or a test registers its own with `register` (and takes
it away with `unregister`). Nothing outside `slokit/sources/` names a source: the loader resolves `source:` here,
and generators ask the `SignalSource` the spec carries.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from slokit.sources.base import SignalSource
from slokit.sources.dynamo import Dynamo
from slokit.sources.exporter import SlokitExporter
from slokit.sources.llm_d import LlmD
from slokit.sources.otel_genai import OtelGenAi
from slokit.sources.sglang import Sglang
from slokit.sources.tgi import Tgi
from slokit.sources.trtllm import TensorRtLlm
from slokit.sources.vllm import Vllm

DEFAULT = "slokit"
_REGISTRY: dict[str, SignalSource] = {}


def register(source: SignalSource) -> SignalSource:
    """Make `source:` <source.name> mean this source; a name can be registered once."""
    if source.name in _REGISTRY:
        raise ValueError(f"source {source.name!r} is registered already ({_REGISTRY[source.name]!r})")
    _REGISTRY[source.name] = source
    return source


def unregister(name: str) -> None:
    """Forget a source (tests that register a throw-away one)."""
    _REGISTRY.pop(name, None)


@contextmanager
def registered(source: SignalSource) -> Iterator[SignalSource]:
    """`source` registered for the duration of a `with` block."""
    register(source)
    try:
        yield source
    finally:
        unregister(source.name)


def get(name: str) -> SignalSource | None:
    """The source a spec's `source:` value names; None if there is none."""
    return _REGISTRY.get(name)


def default() -> SignalSource:
    """The source of a spec that names none: slokit's exporter."""
    return _REGISTRY[DEFAULT]


def all_sources() -> tuple[SignalSource, ...]:
    """Every registered source, in registration order."""
    return tuple(_REGISTRY.values())


def known_buckets(histogram: str) -> tuple[float, ...] | None:
    """The boundaries some source is known to write on a histogram a spec names itself (None: unknown)."""
    for source in _REGISTRY.values():
        found = source.known_buckets(histogram)
        if found is not None:
            return found
    return None


for _source in (SlokitExporter(), Vllm(), Sglang(), Tgi(), TensorRtLlm(), LlmD(), Dynamo(), OtelGenAi()):
    register(_source)
