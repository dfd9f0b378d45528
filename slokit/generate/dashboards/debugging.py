"""The debugging board: one row per step of `slokit.generate.debug_steps`, in the order the runbook walks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from slokit import promql, schema
from slokit.generate import debug_steps
from slokit.generate.dashboards.exprs import (
    LOW_TRAFFIC_TEXT,
    SLO_KEYS,
    RawVars,
    constant_series,
    enough,
    eq,
    legend_format,
    model_var,
    quote,
    requests_5m,
    scope,
    selector,
    too_little,
    var,
)
from slokit.generate.dashboards.grafana import (
    Board,
    dashboard_json,
    override_axis_right,
    override_dashed,
    override_low_traffic,
    stat,
    threshold_steps,
    timeseries,
)
from slokit.generate.dashboards.identity import PanelRef, dashboard_uid
from slokit.plan import roofline
from slokit.schema import Sli
from slokit.spec import Spec
from slokit.units import format_duration

RATE_INTERVAL: Final = "$__rate_interval"


@dataclass(frozen=True)
class _Rows:
    """The debugging board's rows, one method per step of `debug_steps`, on one board and one spec's selectors."""

    spec: Spec
    board: Board

    @property
    def q(self) -> RawVars:
        return RawVars(self.spec)

    @property
    def by_engine(self) -> str:
        """Per engine means per replica: model, the replica labels, then the engine label."""
        m = self.spec.metrics
        labels = [m.model_label, *self.spec.alerting.replica_labels, m.engine_label]
        return ", ".join(label for label in labels if label is not None)

    @property
    def engines(self) -> debug_steps.Series:
        """Engine-level series under the model and engine variables (no class, even where the source has one)."""
        return self.series(self.q.engine_only())

    @staticmethod
    def series(matchers: Sequence[str]) -> debug_steps.Series:
        """`debug_steps`' queries over these matchers and Grafana's rate interval."""
        return debug_steps.Series(lambda metric: selector(metric, matchers), RATE_INTERVAL)

    def add(self, step: debug_steps.DebugStep) -> None:
        """The row of one step: its header, then its panels."""
        self.board.row(step.row_title, key=("step", step.key.value))
        rows: dict[debug_steps.StepKey, Callable[[], None]] = {
            debug_steps.StepKey.API_SERVER: self.api_server,
            debug_steps.StepKey.QUEUE: self.queue,
            debug_steps.StepKey.DECODE: self.decode,
            debug_steps.StepKey.KV_CACHE: self.kv_cache,
            debug_steps.StepKey.INTERCONNECT: self.interconnect,
        }
        rows[step.key]()

    def api_server(self) -> None:
        """Step 0, before the engine queue: does the API server hold requests before the engine sees them?

        The frontend's TTFT starts when the HTTP request enters vLLM's app, the engine's when the engine receives
        it; the gap between the two is time spent in the API server (HTTP, tokenisation, a CPU-starved event loop).
        """
        board, q, m = self.board, self.q, self.spec.metrics
        group = ", ".join(label for label in q.by_labels if label != m.engine_label)
        frontend, engine = m.frontend_latency[Sli.TTFT], m.latency[Sli.TTFT]
        at_frontend = self.series(q.raw(with_engine=False))
        at_engine = self.series(q.raw())
        legend = legend_format(*group.split(", "))
        board.add(
            timeseries(
                "TTFT p95: frontend vs engine",
                "p95 time to first token measured at the API server's ASGI layer (arrival of the HTTP request to the "
                "first streamed content byte) and inside the engine (engine arrival to first token). Both are "
                "interpolated from histogram buckets. Close together: the API server adds nothing; go to step 1.",
                [
                    (debug_steps.quantile(0.95, at_frontend, frontend, group), f"frontend {legend}"),
                    (debug_steps.quantile(0.95, at_engine, engine, group), f"engine {legend}"),
                ],
                "s",
                minimum=0,
            ),
            12,
            8,
            key=("frontend",),
        )
        board.add(
            timeseries(
                "API server gap (frontend - engine TTFT, mean)",
                "Mean seconds between a request reaching the API server and reaching the engine's first token clock, "
                "per model and class (frontend mean TTFT minus engine mean TTFT). Growing while the engine's own TTFT "
                "is flat: the API server is saturated (CPU-starved event loop, tokenisation, a slow middleware); give "
                "it CPU or more API-server processes (--api-server-count), not more engines.",
                [
                    (
                        f"{debug_steps.mean(at_frontend, frontend, group)} - "
                        f"{debug_steps.mean(at_engine, engine, group)}",
                        f"gap {legend}",
                    )
                ],
                "s",
            ),
            12,
            8,
            key=("frontend_gap",),
        )

    def queue(self) -> None:
        """Step 1: waiting against running and the engine's maximum, queue time, the scale-out signal."""
        self._waiting_vs_running()
        self._queue_time()
        self._scale_out_signal()

    def _waiting_vs_running(self) -> None:
        """Waiting against running and each model's --max-num-seqs: full engines with a queue call for scaling
        out; a queue below the maximum points at the KV cache instead."""
        spec, board, m = self.spec, self.board, self.spec.metrics
        model, engine, by_engine = m.model_label, m.engine_label, self.by_engine
        waiting = debug_steps.waiting(spec, self.engines, by_engine)
        running = debug_steps.running(spec, self.engines, by_engine)
        by_model = model or ""  # no model label (TGI): the spec's one model
        serving = f"group by ({by_model}) ({selector(m.requests_running, [*scope(spec), *model_var(model)])})"
        maxima = [
            (
                f"{constant_series(float(x.max_num_seqs), {model: x.name} if model else {})} and on ({by_model}) "
                f"{serving}",
                f"max running {x.name}",
            )
            for x in spec.models
        ]
        board.add(
            timeseries(
                "Waiting vs running vs the engine's maximum",
                "Requests waiting for a slot against requests running, per engine, and each model's --max-num-seqs "
                "(dashed). Running at the maximum with requests waiting: the engine is full and TTFT grows with the "
                "queue; scale out. Waiting while running is below the maximum: the KV cache is full"
                + (" (step 3)." if m.kv_cache_usage is not None else "."),
                [
                    *([(waiting, f"waiting {legend_format(model, engine)}")] if waiting is not None else []),
                    (running, f"running {legend_format(model, engine)}"),
                    *maxima,
                ],
                "short",
                overrides=[override_dashed("^max running ", "red")],
                minimum=0,
            ),
            12,
            8,
            key=("queue",),
        )

    def _queue_time(self) -> None:
        """p99 queue time per model and class: the part of TTFT that scaling out removes."""
        spec, board, q, engine = self.spec, self.board, self.q, self.spec.metrics.engine_label
        group = ", ".join(label for label in q.by_labels if label != engine)
        queue_time = debug_steps.queue_time_p99(spec, self.series(q.raw(with_class=True)), group)
        board.add(
            timeseries(
                "Queue time p99",
                "Time from arrival to first scheduling, p99 per model and class: the part of TTFT that scaling out "
                "removes.",
                [(queue_time, "p99 " + legend_format(*group.split(", ")))],
                "s",
                minimum=0,
            ),
            6,
            8,
            key=("queue_time",),
        )

    def _scale_out_signal(self) -> None:
        """The recorded scale-out signal autoscalers read, with "too little traffic" where TTFT classes are quiet
        (the signal reads 0 for autoscalers there)."""
        spec, board = self.spec, self.board
        scale_out = spec.alerting.scale_out
        ttft_classes = [rc.name for rc in spec.classes if (slo := rc.slos.get(Sli.TTFT)) and slo.objective is not None]
        signal_filter = [var(schema.RULE_LABEL_SERVICE, "service"), var(schema.RULE_LABEL_MODEL, "model"),
                         var(schema.RULE_LABEL_CLASS, "class")]  # fmt: skip
        scale = selector(schema.RECORD_SCALE_OUT, signal_filter)
        legend = legend_format(schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS)
        scale_queries = [(scale, legend)]
        if ttft_classes:
            requests = requests_5m(
                [*signal_filter, f"{schema.RULE_LABEL_CLASS}=~{quote(promql.any_of(ttft_classes))}",
                 eq(schema.RULE_LABEL_SLO, Sli.TTFT.value)]
            )  # fmt: skip
            keys = f"on ({', '.join(SLO_KEYS)})"
            scale_queries = [
                (f"{scale} and {keys} {enough(spec, requests)}", legend),
                (too_little(spec, requests, 0), f"{LOW_TRAFFIC_TEXT} {legend}"),
            ]
        board.add(
            timeseries(
                "Scale-out signal",
                f"Share of TTFTs above {scale_out.fraction_of_slo:g}x the TTFT objective's threshold (a bucket "
                f"count, no interpolation) against the share the objective allows above its threshold, scaled so "
                f"that {scale_out.fraction_of_slo:g} (dashed) means the two are equal; autoscalers add replicas above "
                f"it held for {format_duration(scale_out.for_)}. With fewer than {spec.alerting.min_requests} "
                f"requests in the 5m "
                f'window (alerting.min_requests) the signal reads 0 for autoscalers and the grey "{LOW_TRAFFIC_TEXT}" '
                "line shows here instead.",
                scale_queries,
                "percentunit",
                thresholds=[(scale_out.fraction_of_slo, "red")],
                overrides=[override_low_traffic()],
                minimum=0,
            ),
            6,
            8,
            key=("scale_out",),
        )

    def decode(self) -> None:
        """Step 2: decode tokens/s per engine against the planner's expectation at the batch it runs."""
        spec, board, q, m = self.spec, self.board, self.q, self.spec.metrics
        model, engine, by_engine = m.model_label, m.engine_label, self.by_engine
        decode = debug_steps.decode_tokens(spec, self.engines, by_engine)

        def one_model(name: str) -> list[str]:
            return [eq(model, name)] if model else []  # no model label (TGI): the spec's one model

        decode_queries = [(decode, f"decode {legend_format(model, engine)}")]
        expected = debug_steps.expected_decode(
            (curve, debug_steps.running_batch(spec, self.series([*q.engine_only(), *one_model(x.name)]), by_engine))
            for x in spec.models
            if (curve := roofline.expected_decode_curve(spec, x)) is not None
        )
        if expected is not None:
            decode_queries.append((expected, f"expected {legend_format(model, engine)}"))
            decode_queries.append(
                (selector(schema.RECORD_EXPECTED_DECODE_TOKENS, [var(schema.RULE_LABEL_SERVICE, "service"),
                                                                   var(schema.RULE_LABEL_MODEL, "model")]),
                 f"planned batch {legend_format(schema.RULE_LABEL_MODEL)}")
            )  # fmt: skip
        board.add(
            timeseries(
                "Decode tokens/s per engine against expected at its batch",
                "Generated tokens per second per engine against the roofline planner's expectation for the model on "
                "its GPUs at the number of requests that engine is running (dashed; mean over the rate interval): a "
                "decode step reads the weights once and each running sequence's KV, so an engine running few "
                "requests is expected to emit few tokens/s. The dotted line is the planner's figure at its largest "
                "batch within the ITL objective, the most an engine should reach. Well below the dashed line while "
                "requests run: the GPU is slower than it should be (step 4) or runs another configuration than "
                "planned.",
                decode_queries,
                "short",
                overrides=[
                    override_dashed("^expected ", "blue"),
                    {
                        "matcher": {"id": "byRegexp", "options": "^planned batch "},
                        "properties": [
                            {"id": "custom.lineStyle", "value": {"fill": "dot", "dash": [0, 10]}},
                            {"id": "color", "value": {"mode": "fixed", "fixedColor": "#8e8e8e"}},
                        ],
                    },
                ],
                minimum=0,
            ),
            12,
            8,
            key=("decode",),
        )
        per_engine = decode
        per_seq = f"{per_engine} / clamp_min({debug_steps.running(spec, self.engines, by_engine)}, 1)"
        board.add(
            timeseries(
                "Decode tokens/s per engine and per running request",
                "Per engine, and per running request (tokens/s each stream sees: 1 / ITL). A per-request rate that "
                "falls as running grows is the batch-size/ITL trade-off the tuning section sets.",
                [
                    (per_engine, f"engine {legend_format(model, engine)}"),
                    (per_seq, f"per request {legend_format(model, engine)}"),
                ],
                "short",
                overrides=[override_axis_right("^per request ", "short")],
                minimum=0,
            ),
            12,
            8,
            key=("decode_engine",),
        )

    def kv_cache(self) -> None:
        """Step 3: KV-cache usage, preemptions, prefix-cache hits."""
        spec, board, m = self.spec, self.board, self.spec.metrics
        model, engine, by_engine = m.model_label, m.engine_label, self.by_engine
        kv = debug_steps.kv_cache_usage(spec, self.engines, by_engine)
        preempt = debug_steps.preemptions(spec, self.engines, by_engine)
        if kv is None or preempt is None:  # the source exports neither (TGI)
            return
        board.add(
            timeseries(
                "KV cache usage",
                "Share of KV-cache blocks in use per engine; the alert level is "
                f"{spec.alerting.kv_cache_usage_max:.0%} (dashed). Near 100% the scheduler stops admitting requests "
                "and preempts running ones.",
                [(kv, legend_format(model, engine))],
                "percentunit",
                thresholds=[(spec.alerting.kv_cache_usage_max, "red")],
                minimum=0,
                maximum=1,
            ),
            8,
            8,
            key=("kv",),
        )
        board.add(
            timeseries(
                "Preemptions per second",
                "Requests evicted from the KV cache and recomputed later: each one adds its whole prefill again to "
                "someone's latency. Healthy is 0.",
                [(preempt, legend_format(model, engine))],
                "short",
                thresholds=[(0.01, "red")],
                minimum=0,
            ),
            8,
            8,
            key=("preemptions",),
        )
        hit_rate = debug_steps.prefix_cache_hit_rate(spec, self.engines, by_engine)
        if hit_rate is not None:
            board.add(
                timeseries(
                    "Prefix-cache hit rate",
                    "Share of prompt tokens served from the prefix cache. Shared system prompts should keep this "
                    "high; a drop raises prefill work and TTFT.",
                    [(hit_rate, legend_format(model, engine))],
                    "percentunit",
                    minimum=0,
                    maximum=1,
                ),
                8,
                8,
                key=("prefix_cache",),
            )

    def interconnect(self) -> None:
        """Step 4: NVLink, PCIe, HBM, clocks and XIDs per GPU, the sidecar, and the engines reporting."""
        self._links()
        self._hbm()
        self._gpu_health()
        self._reporting()

    def _links(self) -> None:
        """NVLink and PCIe bytes per GPU: tensor-parallel traffic and KV offload or host-streamed weights."""
        board, uuid = self.board, schema.GPU_UUID_LABEL
        board.add(
            timeseries(
                "NVLink throughput",
                "Bytes per second over NVLink per GPU, sent and received. Tensor-parallel decode moves activations "
                "every layer: equal traffic on every GPU is healthy; one GPU low, or all falling while requests run, "
                "points at a link or NCCL problem.",
                [
                    (debug_steps.gpu_bytes_rate(schema.GPU_NVLINK_TX, RATE_INTERVAL), f"tx {{{{{uuid}}}}}"),
                    (debug_steps.gpu_bytes_rate(schema.GPU_NVLINK_RX, RATE_INTERVAL), f"rx {{{{{uuid}}}}}"),
                ],
                "Bps",
                minimum=0,
            ),
            12,
            8,
            key=("nvlink",),
        )
        board.add(
            timeseries(
                "PCIe throughput",
                "Bytes per second over PCIe per GPU. High PCIe traffic during decode means KV offload or weights "
                "streaming from host memory.",
                [
                    (debug_steps.gpu_bytes_rate(schema.GPU_PCIE_TX, RATE_INTERVAL), f"tx {{{{{uuid}}}}}"),
                    (debug_steps.gpu_bytes_rate(schema.GPU_PCIE_RX, RATE_INTERVAL), f"rx {{{{{uuid}}}}}"),
                ],
                "Bps",
                minimum=0,
            ),
            12,
            8,
            key=("pcie",),
        )

    def _hbm(self) -> None:
        """HBM used against total, and HBM bandwidth against the GPU's peak (decode is bandwidth-bound)."""
        board, uuid = self.board, schema.GPU_UUID_LABEL
        board.add(
            timeseries(
                "HBM used",
                "Memory used per GPU against its total (dashed). vLLM pre-allocates the KV cache, so used stays flat; "
                "KV pressure shows in step 3, not here.",
                [
                    (debug_steps.gpu_max(schema.GPU_MEMORY_USED), f"used {{{{{uuid}}}}}"),
                    (debug_steps.gpu_max(schema.GPU_MEMORY_TOTAL), f"total {{{{{uuid}}}}}"),
                ],
                "bytes",
                overrides=[override_dashed("^total ", "red")],
                minimum=0,
            ),
            8,
            8,
            key=("hbm",),
        )
        board.add(
            timeseries(
                "HBM bandwidth against the GPU's peak",
                "Bytes per second read and written to HBM (utilisation x peak) against the GPU's peak bandwidth "
                "(dashed). Decode is bandwidth-bound: high utilisation with low tokens/s means the batch is too "
                "small or the model is not the one expected.",
                [
                    (
                        f"{debug_steps.gpu_max(schema.GPU_MEMORY_BANDWIDTH_UTILIZATION)} * on ({uuid}) "
                        f"{debug_steps.gpu_max(schema.GPU_PEAK_MEMORY_BANDWIDTH)}",
                        f"used {{{{{uuid}}}}}",
                    ),
                    (debug_steps.gpu_max(schema.GPU_PEAK_MEMORY_BANDWIDTH), f"peak {{{{{uuid}}}}}"),
                ],
                "Bps",
                overrides=[override_dashed("^peak ", "red")],
                minimum=0,
            ),
            8,
            8,
            key=("bandwidth",),
        )

    def _gpu_health(self) -> None:
        """Clock throttling reasons and XID errors per GPU: a slow or failing GPU explains slow decode."""
        board, uuid = self.board, schema.GPU_UUID_LABEL
        board.add(
            timeseries(
                "Clock throttling and XID errors",
                "Clock-event reasons active per GPU (1 = active; idle is normal), and XID errors in the interval. "
                "Thermal or power slowdown during a breach explains slow decode; any XID (79: fell off the bus, 48: "
                "double-bit ECC, 94/95: contained/uncontained ECC) needs the GPU drained.",
                [
                    (debug_steps.clock_event_reasons(), f"{{{{reason}}}} {{{{{uuid}}}}}"),
                    (
                        debug_steps.xid_errors(RATE_INTERVAL),
                        f"XID {{{{xid}}}} {{{{{uuid}}}}}",
                    ),
                ],
                "short",
                minimum=0,
            ),
            8,
            8,
            key=("gpu_health",),
        )

    def _reporting(self) -> None:
        """Whether the NVML sidecar and the engines are scraped at all: without them every panel above
        under-counts."""
        spec, board, m = self.spec, self.board, self.spec.metrics
        model, uuid = m.model_label, schema.GPU_UUID_LABEL
        board.add(
            stat(
                "GPU sidecar up",
                "1 when the NVML sidecar reads the GPU; 0 means no driver, a lost GPU or an unsupported device: the "
                "GPU panels above are empty for it.",
                [(debug_steps.gpu_max(schema.GPU_UP), f"{{{{{uuid}}}}}")],
                "none",
                threshold_steps("red", [(1.0, "green")]),
            ),
            12,
            5,
            key=("gpu_up",),
        )
        engines = f"count by ({model or ''}) ({selector(m.requests_running, [*scope(spec), *model_var(model)])})"
        board.add(
            stat(
                "Engines reporting",
                "Engines whose metrics Prometheus scrapes, per model. Fewer than deployed: a scrape target is down "
                "and every panel above under-counts.",
                [(engines, legend_format(model))],
                "none",
                threshold_steps("red", [(1.0, "green")]),
            ),
            12,
            5,
            key=("engines",),
        )


def build(spec: Spec) -> tuple[dict[str, Any], dict[tuple[str, ...], PanelRef]]:
    """The debugging board: one row per step that applies to the spec, in the runbook's order."""
    name = "debugging"
    board = Board(name, dashboard_uid(spec, name), f"{spec.service} · Debugging")
    rows = _Rows(spec, board)
    for step in debug_steps.steps(spec):
        rows.add(step)
    data = dashboard_json(
        spec,
        board,
        f"Debugging {spec.service} in the runbook's order: queue depth, decode throughput, KV cache, interconnect.",
    )
    return data, board.refs
