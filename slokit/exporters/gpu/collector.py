"""The collector: the poller's latest snapshot -> Prometheus metric families (never calls NVML)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from slokit import schema as S
from slokit.exporters.gpu.catalogue import METRICS, UUID, MetricDef
from slokit.exporters.gpu.poller import GpuPoller
from slokit.exporters.gpu.snapshot import Series


class GpuCollector(Collector):
    """Converts the poller's latest snapshot into Prometheus families on every scrape.

    A snapshot older than `stale_after` seconds (a wedged poll) is not served as current: every GPU reads
    `slokit_gpu_up 0` until the poller catches up, so dashboards never show frozen values as live.
    """

    def __init__(self, poller: GpuPoller, stale_after: float | None = None) -> None:
        self._poller = poller
        self._stale_after = stale_after if stale_after is not None else max(5 * poller.interval, 15.0)

    def describe(self) -> Iterable[Metric]:
        """Nothing: registration must not trigger a collection."""
        return []

    def collect(self) -> Iterator[Metric]:
        """One family per catalogue entry, built fresh from the latest snapshot."""
        poller = self._poller
        snap = poller.snapshot()
        errors, xids, last_xid = poller.counters()
        stale = snap.timestamp > 0 and poller.age() > self._stale_after
        by_name: dict[str, list[Series]] = {}
        if not stale:
            for series in snap.series:
                by_name.setdefault(series.name, []).append(series)
        uuids = sorted(snap.up)
        up_any = [(uuid, snap.up[uuid] and not stale) for uuid in uuids]
        identities = snap.identities
        support = snap.support
        for mdef in METRICS:
            family = _family(mdef)
            name = mdef.name
            if name == S.GPU_UP:
                if not up_any:
                    family.add_sample(name, {}, 0.0)  # no driver, no GPU: one unlabelled 0
                for uuid, up in up_any:
                    family.add_sample(name, {UUID: uuid}, 1.0 if up else 0.0)
            elif name == S.GPU_INFO:
                for uuid in uuids:
                    if uuid in identities:
                        model, bus, preset = identities[uuid]
                        family.add_metric([uuid, model, bus, snap.driver_version, preset], 1.0)
            elif name == S.GPU_XID_ERRORS:
                for (uuid, xid), count in sorted(xids.items()):
                    family.add_metric([uuid, str(xid)], float(count))
            elif name == S.GPU_LAST_XID:
                for uuid in uuids:
                    if S.GPU_XID_ERRORS in support.get(uuid, {}) or uuid in last_xid:
                        family.add_metric([uuid], float(last_xid.get(uuid, 0)))
            elif name == S.GPU_METRIC_SUPPORTED:
                for uuid in uuids:
                    for metric, ok in support.get(uuid, {}).items():
                        family.add_metric([uuid, metric], 1.0 if ok else 0.0)
            elif name == S.GPU_NVML_ERRORS:
                for (op, error), count in sorted(errors.items()):
                    family.add_metric([op, error], float(count))
            elif name == S.GPU_COLLECT_DURATION:
                if snap.timestamp:
                    family.add_metric([], snap.duration)
            elif name == S.GPU_LAST_COLLECT:
                if snap.timestamp:
                    family.add_metric([], snap.timestamp)
            else:
                for series in by_name.get(name, []):
                    family.add_metric([v for _, v in series.labels], series.value)
            if family.samples:
                yield family


def _family(mdef: MetricDef) -> GaugeMetricFamily | CounterMetricFamily:
    labels = ([UUID] if mdef.per_gpu else []) + list(mdef.labels)
    if mdef.kind == "counter":
        return CounterMetricFamily(mdef.name, mdef.help, labels=labels)
    return GaugeMetricFamily(mdef.name, mdef.help, labels=labels)
