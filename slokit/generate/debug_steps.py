"""The debugging steps, in the order the runbook walks them and the debugging dashboard shows them.

One owner for the step list, its order, what each step asks, its healthy figures and the PromQL both renderers
show, so that the dashboard rows and the runbook guides cannot drift apart: a new step, or a changed query, is made
here once. The renderers differ only in how they select a series (Grafana variables on the dashboard, the alert's
model and class in the runbook, both from `slokit.generate.queries`) and in the range of a rate (`$__rate_interval`
against `5m`), which they pass in as a `Series`; legends, panel layout and prose stay with each renderer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from slokit import schema
from slokit.generate.queries import expected_decode_at_batch, union
from slokit.plan.roofline import DecodePoint
from slokit.spec import Spec

# Healthy figures the steps quote: decode at this share of the planner's expected tokens/s or more, and a queue-time
# p99 under this share of the TTFT objective.
DECODE_HEALTHY_SHARE: Final = 0.7
QUEUE_TIME_SHARE_OF_TTFT: Final = 0.2


class StepKey(StrEnum):
    """The steps by name; each is also the key of the dashboard panel the runbook links the step to."""

    API_SERVER = "frontend"
    QUEUE = "queue"
    DECODE = "decode"
    KV_CACHE = "kv"
    INTERCONNECT = "nvlink"


@dataclass(frozen=True)
class DebugStep:
    """One step: its number, title, the question it answers (the runbook's words, and the dashboard row's shorter
    ones), and the panel that shows it."""

    key: StepKey
    number: int
    title: str
    question: str
    row_question: str

    @property
    def panel(self) -> tuple[str, ...]:
        """The dashboard panel key (`Built.refs`) of the step's first panel."""
        return (self.key.value,)

    @property
    def row_title(self) -> str:
        """The debugging dashboard's row header."""
        return f"{self.number}. {self.title}: {self.row_question}"


API_SERVER: Final = DebugStep(
    StepKey.API_SERVER,
    0,
    "API server saturation",
    "Does the API server hold requests before the engine sees them?",
    "does the API server hold requests before the engine sees them?",
)
QUEUE: Final = DebugStep(
    StepKey.QUEUE,
    1,
    "Queue depth",
    "Is the engine receiving more concurrent requests than it can handle?",
    "more concurrent requests than the engine can run?",
)
DECODE: Final = DebugStep(
    StepKey.DECODE,
    2,
    "Decode throughput",
    "Is decode slower than the expected tokens/s at the batch it is running?",
    "below the expected tokens/s at the batch running?",
)
KV_CACHE: Final = DebugStep(
    StepKey.KV_CACHE,
    3,
    "KV cache",
    "Is the KV cache at its limit, preempting or offloading?",
    "at its limit, preempting?",
)
INTERCONNECT: Final = DebugStep(
    StepKey.INTERCONNECT,
    4,
    "Interconnect and GPU",
    "Is NCCL / NVLink / PCIe slower than expected, or erroring?",
    "NVLink, PCIe, HBM, throttling, XIDs",
)


def has_frontend(spec: Spec) -> bool:
    """Whether the source has frontend histograms (slokit's exporter), so the API-server step applies."""
    return bool(spec.metrics.frontend_latency)


def steps(spec: Spec) -> tuple[DebugStep, ...]:
    """The steps that apply to `spec`, in order: the API server first where the source measures it, the KV cache
    where the source exports its usage (TGI does not)."""
    first = (API_SERVER,) if has_frontend(spec) else ()
    kv = (KV_CACHE,) if spec.metrics.kv_cache_usage is not None else ()
    return (*first, QUEUE, DECODE, *kv, INTERCONNECT)


# ==============================================================================================================
# The shared queries
# ==============================================================================================================
@dataclass(frozen=True)
class Series:
    """How one renderer writes a raw series: `select` turns a metric name into a selector with the renderer's
    matchers, `window` is the range of a rate."""

    select: Callable[[str], str]
    window: str

    def __call__(self, metric: str) -> str:
        return self.select(metric)

    def rate(self, metric: str) -> str:
        return f"rate({self.select(metric)}[{self.window}])"


def quantile(q: float, series: Series, histogram: str, by: str) -> str:
    """A percentile of a histogram's buckets over the rate window, grouped `by`."""
    labels = ", ".join(label for label in ("le", by) if label)
    return f"histogram_quantile({q:g}, sum by ({labels}) ({series.rate(histogram + '_bucket')}))"


def mean(series: Series, histogram: str, by: str) -> str:
    """A histogram's mean over the rate window (sum over count), grouped `by`."""
    return f"sum by ({by}) ({series.rate(histogram + '_sum')}) / sum by ({by}) ({series.rate(histogram + '_count')})"


def waiting(spec: Spec, series: Series, by: str) -> str | None:
    """Step 1: requests waiting for a slot (None: the source exports no queue gauge)."""
    metric = spec.metrics.requests_waiting
    return None if metric is None else f"sum by ({by}) ({series(metric)})"


def running(spec: Spec, series: Series, by: str) -> str:
    """Step 1: requests running (the batch)."""
    return f"sum by ({by}) ({series(spec.metrics.requests_running)})"


def queue_time_p99(spec: Spec, series: Series, by: str) -> str:
    """Step 1: time from arrival to first scheduling, p99: the part of TTFT that scaling out removes."""
    return quantile(0.99, series, spec.metrics.queue_time, by)


def decode_tokens(spec: Spec, series: Series, by: str) -> str:
    """Step 2: generated tokens per second."""
    return f"sum by ({by}) ({series.rate(spec.metrics.generation_tokens)})"


def running_batch(spec: Spec, series: Series, by: str) -> str:
    """Step 2: mean requests running over the rate window: the batch decode runs at."""
    return f"sum by ({by}) (avg_over_time({series(spec.metrics.requests_running)}[{series.window}]))"


def expected_decode(curves: Iterable[tuple[Sequence[DecodePoint], str]]) -> str | None:
    """Step 2: the planner's expected decode tokens/s per engine at the batch each engine runs, for each (curve,
    running batch query) of the models the planner has a figure for; None when it has none."""
    terms = [expected_decode_at_batch([(p.batch, p.step_seconds) for p in curve], batch) for curve, batch in curves]
    return union(terms) if terms else None


def kv_cache_usage(spec: Spec, series: Series, by: str) -> str | None:
    """Step 3: the share of KV-cache blocks in use (0..1); None when the source has no such gauge (TGI)."""
    metric = spec.metrics.kv_cache_usage
    return None if metric is None else f"max by ({by}) ({series(metric)})"


def preemptions(spec: Spec, series: Series, by: str) -> str | None:
    """Step 3: requests evicted from the KV cache per second; None when the source counts none (TGI)."""
    metric = spec.metrics.preemptions
    return None if metric is None else f"sum by ({by}) ({series.rate(metric)})"


def prefix_cache_hit_rate(spec: Spec, series: Series, by: str) -> str | None:
    """Step 3: the share of prompt tokens served from the prefix cache; None when the source has no counters."""
    m = spec.metrics
    if m.prefix_cache_hits is None or m.prefix_cache_queries is None:
        return None
    return f"sum by ({by}) ({series.rate(m.prefix_cache_hits)}) / sum by ({by}) ({series.rate(m.prefix_cache_queries)})"


def gpu_bytes_rate(metric: str, window: str) -> str:
    """Step 4: bytes per second per GPU over one link counter (NVLink, PCIe)."""
    return f"sum by ({schema.GPU_UUID_LABEL}) (rate({metric}[{window}]))"


def gpu_max(metric: str) -> str:
    """Step 4: one GPU gauge per GPU."""
    return f"max by ({schema.GPU_UUID_LABEL}) ({metric})"


def clock_event_reasons() -> str:
    """Step 4: the clock-event reasons per GPU (1 = active)."""
    return f"max by ({schema.GPU_UUID_LABEL}, {schema.GPU_REASON_LABEL}) ({schema.GPU_CLOCK_EVENT_REASONS})"


def xid_errors(window: str) -> str:
    """Step 4: XID errors per GPU and code over `window`."""
    uuid = schema.GPU_UUID_LABEL
    return f"sum by ({uuid}, {schema.GPU_XID_LABEL}) (increase({schema.GPU_XID_ERRORS}[{window}]))"
