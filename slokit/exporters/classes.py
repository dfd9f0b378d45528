"""The vllm-free half of slokit's exporter: request classes, the class header hook and cheap metric storage.

`vllm.py` (the only module importing vllm) wires these into vLLM; everything here is plain Python, so it is unit
tested without an engine and reused by the overhead benchmark.

* `ClassMap`: the bounded set of class label values (the spec's classes plus `other`, or the single `default`
  class without a spec) and the rule that maps a request's header, priority and prompt length onto one of them.
  A client can never create a label value: anything undeclared becomes `other`.
* The class header travels from the HTTP request to the engine's request bookkeeping in a `ContextVar` set by an
  ASGI wrapper (`header_from_scope`, `ClassHeaderMiddleware`); Python users of `AsyncLLM` set it with
  `request_class("chat")`.
* `FastHistogram` / `MetricStore`: observations are a `bisect` and two list additions on vLLM's output loop;
  Prometheus exposition objects are built only at scrape time (a custom collector), which is what keeps
  `record()` under half the cost of vLLM's own `PrometheusStatLogger`.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from slokit import schema
from slokit.schema import Sli
from slokit.sources import exporter as exporter_source
from slokit.spec import Spec, SpecError, load_spec
from slokit.units import format_le

MAX_HEADER_BYTES: Final = 64  # longer header values are not classes (the spec's header pattern allows 63)
DRILL_ENV: Final = "SLOKIT_EXPORTER_DRILL_HEADER"  # chaos drill: this header value makes the exporter fault

_HEADER_KEY: Final = schema.CLASS_HEADER.encode("latin-1")
CLASS_HEADER_VAR: contextvars.ContextVar[str | None] = contextvars.ContextVar("slokit_class_header", default=None)

ASGIScope = MutableMapping[str, Any]
ASGIReceive = Callable[[], Awaitable[MutableMapping[str, Any]]]
ASGISend = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[ASGIScope, ASGIReceive, ASGISend], Awaitable[None]]


class ExporterConfigError(Exception):
    """The exporter cannot start as configured (bad SLOKIT_SPEC); the message says what to fix."""


# ==============================================================================================================
# Request classes
# ==============================================================================================================
@dataclass(frozen=True)
class ClassMap:
    """The class label values the exporter may write, and how a request is assigned to one.

    `names[i]` is the label of class index `i`; the last index is always the catch-all (`other`, or `default`
    when there is no spec). Indices keep the hot path on list lookups instead of string hashing.
    """

    spec: Spec | None
    names: tuple[str, ...]
    drill_header: str | None = None

    @classmethod
    def from_spec(cls, spec: Spec | None, drill_header: str | None = None) -> ClassMap:
        """Build the map for a spec (None: one `default` class)."""
        if spec is None:
            return cls(None, (schema.DEFAULT_CLASS,), drill_header)
        names = tuple(c.name for c in spec.classes if c.name != schema.OTHER_CLASS)
        return cls(spec, (*names, schema.OTHER_CLASS), drill_header)

    @property
    def fallback(self) -> int:
        """Index of the catch-all class (`other`, or `default` without a spec)."""
        return len(self.names) - 1

    def classify(self, header: str | None, priority: int | None, prompt_tokens: int | None) -> int:
        """Class index for a request (header first, then the spec's priority and prompt-length rules)."""
        if self.spec is None:
            return 0
        name = self.spec.classify(header, priority, prompt_tokens)
        try:
            return self.names.index(name)
        except ValueError:
            return self.fallback

    def is_drill(self, header: str | None) -> bool:
        """Whether the request asked for the chaos drill (the exporter faults on it, on purpose)."""
        return self.drill_header is not None and header == self.drill_header


def load_exporter_spec(environ: MutableMapping[str, str] | None = None) -> Spec | None:
    """The spec named by `SLOKIT_SPEC`, or None when it is unset or empty."""
    env = os.environ if environ is None else environ
    path = env.get(exporter_source.SPEC_ENV, "").strip()
    if not path:
        return None
    try:
        return load_spec(Path(path))
    except SpecError as exc:
        raise ExporterConfigError(f"{exporter_source.SPEC_ENV}={path} is not a usable slokit spec:\n{exc}") from None


def model_label(spec: Spec | None, served_model_name: str) -> tuple[str, str | None]:
    """The `model` label value, and a warning when the spec and vLLM disagree about the name.

    vLLM's served name wins when the spec lists it. A spec with a single model names the series after that model
    even if vLLM serves it under another name, so the spec's rules (which select on the spec's model names) match.
    """
    if spec is None or not spec.models:
        return served_model_name, None
    names = [m.name for m in spec.models]
    if served_model_name in names:
        return served_model_name, None
    if len(names) == 1:
        return names[0], (
            f"vLLM serves {served_model_name!r} but the spec's only model is {names[0]!r}; labelling series "
            f"model={names[0]!r} so the spec's rules match (set --served-model-name {names[0]} to silence this)"
        )
    return served_model_name, (
        f"vLLM serves {served_model_name!r}, which is none of the spec's models ({', '.join(names)}); the spec's "
        "rules will not select these series: add it to models[] or change --served-model-name"
    )


def plan_buckets(spec: Spec | None) -> dict[Sli, tuple[float, ...]]:
    """Histogram boundaries per SLI: the spec's (every threshold a boundary), else slokit's default ladders."""
    if spec is None:
        return {sli: tuple(exporter_source.DEFAULT_BUCKETS[sli]) for sli in Sli}
    return {sli: tuple(spec.buckets(sli)) for sli in Sli}


def token_buckets(max_model_len: int) -> tuple[float, ...]:
    """1-2-5 boundaries up to the context length, for the prompt-length histogram."""
    out: list[float] = []
    magnitude = 1
    while True:
        for step in (1, 2, 5):
            value = step * magnitude
            if value > max_model_len:
                return tuple(out) if out else (float(max_model_len),)
            out.append(float(value))
        magnitude *= 10


# ==============================================================================================================
# The class header: HTTP request -> ContextVar -> the engine's request bookkeeping
# ==============================================================================================================
def header_from_scope(scope: ASGIScope) -> str | None:
    """The `x-slokit-class` value of an ASGI HTTP scope (None if absent, not ASCII or too long)."""
    for key, value in scope.get("headers") or ():
        if key == _HEADER_KEY or (len(key) == len(_HEADER_KEY) and key.lower() == _HEADER_KEY):
            if len(value) > MAX_HEADER_BYTES:
                return None
            try:
                return bytes(value).decode("ascii").strip()
            except UnicodeDecodeError:
                return None
    return None


class ClassHeaderMiddleware:
    """Pure ASGI middleware: puts the request's `x-slokit-class` header where the exporter reads it.

    slokit installs the same logic automatically around vLLM's FastAPI app; this class is for other ASGI front
    ends (or `--middleware slokit.exporters.classes.ClassHeaderMiddleware` if the automatic hook is disabled).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        token = CLASS_HEADER_VAR.set(header_from_scope(scope))
        try:
            await self.app(scope, receive, send)
        finally:
            CLASS_HEADER_VAR.reset(token)


# ==============================================================================================================
# The frontend's view of a request (time to first content byte and to the last byte, at the ASGI layer)
# ==============================================================================================================
class FrontendRequest:
    """One HTTP request as the API server's ASGI layer sees it, from arrival to its last byte.

    The engine's clocks start when the engine receives a request; time an overloaded API server holds it (HTTP
    parsing, tokenisation, a starved event loop) is invisible to them but not to users. `cls` is set by the
    exporter when the engine admits the request (or vLLM's admission control refuses it), so only inference
    requests (never /metrics or /health) are observed, under the class the engine-side series use.
    """

    __slots__ = (
        "arrival", "body", "cls", "disconnected", "errored", "first", "last", "rejected", "status", "stream",
        "streaming",
    )  # fmt: skip

    def __init__(self, arrival: float) -> None:
        self.arrival = arrival
        self.cls: int | None = None  # class index, once the engine admitted the request
        self.status = 0
        self.streaming = False  # text/event-stream: TTFT is the first event that carries content
        self.stream: bool | None = None  # the request asked for a stream (from the engine request; None: unknown)
        self.first = 0.0  # stamp of the first content byte handed to the server (0: none yet)
        self.last = 0.0  # stamp of the final body message (0: the response did not finish)
        self.disconnected = False  # the client went away before the response finished
        self.errored = False  # an error event in the stream before any content
        self.rejected = False  # vLLM's admission control refused the request
        self.body: list[bytes] = []  # the request body's chunks (references, no copy) until the request ends

    def on_start(self, message: MutableMapping[str, Any]) -> None:
        """`http.response.start`: the status and whether the body is an event stream."""
        self.status = int(message.get("status", 0))
        for key, value in message.get("headers") or ():
            if bytes(key).lower() == b"content-type":
                self.streaming = bytes(value).lower().startswith(b"text/event-stream")
                break

    def on_body(self, message: MutableMapping[str, Any], stamp: float) -> None:
        """`http.response.body` sent at `stamp`: the first content byte and the end of the response."""
        if self.first == 0.0:
            body = message.get("body") or b""
            if body:
                if not self.streaming or sse_has_content(bytes(body)):
                    self.first = stamp
                elif not self.errored and sse_has_error(bytes(body)):
                    self.errored = True
        if not message.get("more_body", False):
            self.last = stamp

    def on_receive(self, message: MutableMapping[str, Any]) -> None:
        """A message the app received: the request body's chunks, and the client's disconnect."""
        kind = message.get("type")
        if kind == "http.request":
            chunk = message.get("body")
            if chunk:
                self.body.append(chunk)
        elif kind == "http.disconnect" and self.last == 0.0:
            self.disconnected = True

    def request_fields(self) -> tuple[bool | None, int | None]:
        """`stream` and `priority` of the JSON request body (None where absent or unreadable)."""
        try:
            data = json.loads(b"".join(self.body))
        except (ValueError, TypeError):
            return None, None
        if not isinstance(data, dict):
            return None, None
        stream, priority = data.get("stream"), data.get("priority")
        return (
            stream if isinstance(stream, bool) else None,
            priority if isinstance(priority, int) and not isinstance(priority, bool) else None,
        )

    def ttft(self) -> float | None:
        """Arrival to the first content byte of a successful stream (None: not a stream, failed or no content)."""
        if not self.streaming or self.first == 0.0 or not 0 < self.status < 400:
            return None
        return self.first - self.arrival

    def e2e(self) -> float | None:
        """Arrival to the last byte of a successful response (None: failed or did not finish)."""
        if self.last == 0.0 or not 0 < self.status < 400 or self.errored:
            return None
        return self.last - self.arrival

    def failure(self) -> schema.FailReason | None:
        """Why the request ended before its first content byte, or None (it got one, or a complete empty answer).

        rejected: vLLM's admission control; error: an error status, an error event before any content, or a
        response that stopped without the client leaving; client_gone: the client disconnected first.
        """
        if self.rejected:
            return schema.FailReason.REJECTED
        if self.status >= 400:
            return schema.FailReason.ERROR
        if self.first != 0.0:
            return None
        if self.last != 0.0 and not self.errored:
            return None  # a complete, successful response without content (e.g. an immediate stop)
        if self.errored:
            return schema.FailReason.ERROR
        return schema.FailReason.CLIENT_GONE if self.disconnected else schema.FailReason.ERROR

    def streamed(self) -> bool:
        """Whether the request was a stream: as the engine request said, else as the response's content type."""
        return self.stream if self.stream is not None else self.streaming


FRONTEND_REQUEST_VAR: contextvars.ContextVar[FrontendRequest | None] = contextvars.ContextVar(
    "slokit_frontend_request", default=None
)


def sse_has_error(body: bytes) -> bool:
    """Whether a piece of an OpenAI-style event stream carries an error event (`data: {"error": ...}`), which
    vLLM sends with status 200 when a stream fails after its response started."""
    for line in body.split(b"\n"):
        if not line.startswith(b"data:") or b"error" not in line:
            continue
        try:
            obj = json.loads(line[5:].strip())
        except ValueError:
            continue
        if isinstance(obj, dict) and "error" in obj and not obj.get("choices"):
            return True
    return False


def sse_has_content(body: bytes) -> bool:
    """Whether a piece of an OpenAI-style event stream carries generated content (not only a role or usage).

    vLLM's chat stream opens with a role-only chunk (`"delta": {"role": "assistant", "content": ""}`); counting it
    as the first token is the classic early-TTFT bug, so the frontend counts what the probe counts: text, content,
    reasoning or tool calls. Only the first pieces of each response are parsed (until one has content).
    """
    for line in body.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if not data or data == b"[DONE]":
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            return True  # not JSON: bytes the client sees all the same
        choices = obj.get("choices") if isinstance(obj, dict) else None
        if not isinstance(choices, list):
            if isinstance(obj, dict) and "error" in obj:
                continue
            return True
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            if choice.get("text"):
                return True
            delta = choice.get("delta")
            if isinstance(delta, dict) and (
                delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                or delta.get("tool_calls")
            ):  # fmt: skip
                return True
    return False


@contextlib.contextmanager
def request_class(header: str | None) -> Iterator[None]:
    """Python API: requests added to `AsyncLLM`/`LLMEngine` inside this block carry this class header value."""
    token = CLASS_HEADER_VAR.set(header)
    try:
        yield
    finally:
        CLASS_HEADER_VAR.reset(token)


# ==============================================================================================================
# Cheap metric storage, exposed by a custom collector at scrape time
# ==============================================================================================================
class FastHistogram:
    """A histogram child: per-bucket counts (non-cumulative, last one +Inf) followed by the sum, in one list.

    One list, so a scrape copies buckets and sum together (`list(cells)` is atomic under the GIL) and never
    exposes a sum that disagrees with the counts.
    """

    __slots__ = ("bounds", "cells")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        # One float object per cell from the start (not one shared 0.0): memory is the same before and after
        # a bucket's first observation, so a histogram's footprint does not grow as traffic reaches new buckets.
        self.cells: list[float] = [float(0) for _ in range(len(self.bounds) + 2)]

    def observe(self, value: float) -> None:
        """Count one observation (`le` semantics: a value equal to a bound falls in that bound's bucket)."""
        cells = self.cells
        cells[bisect_left(self.bounds, value)] += 1
        cells[-1] += value

    def snapshot(self) -> tuple[list[tuple[str, float]], float, float]:
        """(cumulative buckets with `le` strings, count, sum)."""
        cells = list(self.cells)
        running = 0.0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip(self.bounds, cells, strict=False):
            running += count
            buckets.append((format_le(bound), running))
        running += cells[-2]
        buckets.append(("+Inf", running))
        return buckets, running, cells[-1]


@dataclass
class HistogramFamily:
    """A histogram metric: name, help, label names and its children by label values."""

    name: str
    documentation: str
    labelnames: tuple[str, ...]
    bounds: tuple[float, ...]
    children: dict[tuple[str, ...], FastHistogram] = field(default_factory=dict)

    def child(self, *labels: str) -> FastHistogram:
        """The child for these label values (created once; callers keep the reference)."""
        found = self.children.get(labels)
        if found is None:
            found = self.children[labels] = FastHistogram(self.bounds)
        return found

    def collect(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, hist in list(self.children.items()):
            buckets, _count, total = hist.snapshot()
            family.add_metric(list(labels), buckets, total)
        return family


@dataclass
class ScalarFamily:
    """A counter or gauge metric: values in a list per label-value tuple (`cell[0]`), mutated in place."""

    name: str  # counters: without the `_total` suffix (client_python adds it)
    documentation: str
    labelnames: tuple[str, ...]
    kind: str  # "counter" or "gauge"
    multiprocess_mode: str = "mostrecent"  # gauges under PROMETHEUS_MULTIPROC_DIR: how processes combine
    children: dict[tuple[str, ...], list[float]] = field(default_factory=dict)

    def child(self, *labels: str) -> list[float]:
        """A one-element list holding the value for these label values."""
        found = self.children.get(labels)
        if found is None:
            found = self.children[labels] = [0.0]
        return found

    def collect(self) -> Metric:
        family: CounterMetricFamily | GaugeMetricFamily
        if self.kind == "counter":
            family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        else:
            family = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, cell in list(self.children.items()):
            family.add_metric(list(labels), cell[0])
        return family


class MetricStore(Collector):
    """Every family the exporter writes; registered once on a prometheus_client registry as one collector."""

    def __init__(self, on_collect: Callable[[], None] | None = None) -> None:
        self.families: list[HistogramFamily | ScalarFamily] = []
        self.on_collect = on_collect

    def histogram(
        self, name: str, documentation: str, labelnames: Iterable[str], bounds: Sequence[float]
    ) -> HistogramFamily:
        family = HistogramFamily(name, documentation, tuple(labelnames), tuple(bounds))
        self.families.append(family)
        return family

    def counter(self, name: str, documentation: str, labelnames: Iterable[str]) -> ScalarFamily:
        family = ScalarFamily(name.removesuffix("_total"), documentation, tuple(labelnames), "counter")
        self.families.append(family)
        return family

    def gauge(
        self, name: str, documentation: str, labelnames: Iterable[str], multiprocess_mode: str = "mostrecent"
    ) -> ScalarFamily:
        family = ScalarFamily(name, documentation, tuple(labelnames), "gauge", multiprocess_mode)
        self.families.append(family)
        return family

    def describe(self) -> list[Metric]:
        """Names only (lets the registry check for clashes without building samples)."""
        out: list[Metric] = []
        for family in self.families:
            if isinstance(family, HistogramFamily):
                out.append(HistogramMetricFamily(family.name, family.documentation, labels=family.labelnames))
            elif family.kind == "counter":
                out.append(CounterMetricFamily(family.name, family.documentation, labels=family.labelnames))
            else:
                out.append(GaugeMetricFamily(family.name, family.documentation, labels=family.labelnames))
        return out

    def collect(self) -> Iterator[Metric]:
        if self.on_collect is not None:
            self.on_collect()
        for family in self.families:
            yield family.collect()


# ==============================================================================================================
# Several API-server processes (vLLM's --api-server-count > 1)
# ==============================================================================================================
def multiprocess_enabled() -> bool:
    """Whether prometheus_client writes values to PROMETHEUS_MULTIPROC_DIR files in this process.

    prometheus_client decides once, at import, from the environment; vLLM sets the variable before that when it
    starts several API servers, and then serves /metrics by merging those files only.
    """
    from prometheus_client import values

    return bool(getattr(values.ValueClass, "_multiprocess", False))


class MultiprocessMirror:
    """Copies the store into prometheus_client's per-process files, so vLLM's merged /metrics includes slokit.

    The hot path stays on plain lists; `flush()` (about once a second, from `record()`) adds each cell's change
    since the last flush to a prometheus_client metric of the same name and labels, whose values live in the
    mmap files `MultiProcessCollector` merges. Histogram buckets are incremented per bucket (client_python keeps
    them non-cumulative, like `FastHistogram`), so merged histograms stay exact.
    """

    def __init__(self, store: MetricStore) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self._pairs: list[tuple[HistogramFamily | ScalarFamily, Any]] = []
        for family in store.families:
            metric: Any
            if isinstance(family, HistogramFamily):
                metric = Histogram(
                    family.name, family.documentation, family.labelnames, buckets=family.bounds, registry=None
                )
            elif family.kind == "counter":
                metric = Counter(family.name, family.documentation, family.labelnames, registry=None)
            else:
                metric = Gauge(
                    family.name,
                    family.documentation,
                    family.labelnames,
                    registry=None,
                    multiprocess_mode=family.multiprocess_mode,  # type: ignore[arg-type]
                )
            self._pairs.append((family, metric))
        self._last: dict[tuple[int, tuple[str, ...]], list[float]] = {}

    def flush(self) -> None:
        """Push every change since the previous flush."""
        for index, (family, metric) in enumerate(self._pairs):
            children: list[tuple[tuple[str, ...], FastHistogram | list[float]]] = list(family.children.items())
            for labels, cells in children:
                now: list[float] = list(cells.cells) if isinstance(cells, FastHistogram) else list(cells)
                key = (index, labels)
                before = self._last.get(key)
                self._last[key] = now
                child = metric.labels(*labels) if labels else metric
                if isinstance(family, HistogramFamily):
                    before = before or [0.0] * len(now)
                    for position, bucket in enumerate(child._buckets):
                        change = now[position] - before[position]
                        if change:
                            bucket.inc(change)
                    if now[-1] != before[-1]:
                        child._sum.inc(now[-1] - before[-1])
                elif family.kind == "counter":
                    change = now[0] - (before[0] if before else 0.0)
                    if change:
                        child.inc(change)
                else:
                    child.set(now[0])
