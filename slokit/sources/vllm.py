"""`source: vllm`: vLLM's own `/metrics` (vllm/v1/metrics/loggers.py, PrometheusStatLogger; buckets in
vllm/v1/metrics/buckets.py).

Fixed names, labels `model_name` and `engine` (the data-parallel rank: "0" in every pod, so replicas are told apart
by the spec's replica labels), buckets fixed per vLLM release (changeable only with `--custom-histogram-buckets`
from 0.32). No request class: each class owns its models. The release the spec names (`vllm.version`) picks the
names and buckets from the catalogue in slokit/sources/vllm_releases.py.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, ClassVar, Final

from slokit.schema import Sli, SourceMetrics
from slokit.sources import vllm_releases
from slokit.sources.base import Draft, DraftAcceptance, Problem, SignalSource, nearest_text, slo_paths, threshold_places
from slokit.units import format_duration, format_le

if TYPE_CHECKING:
    from slokit.spec.model import Spec, VllmSettings

# vLLM's speculative-decoding counters (only with --speculative-config; labels model_name, engine). The runbook's
# tuning section reads them for the draft acceptance rate.
DRAFT_ACCEPTANCE: Final = DraftAcceptance(
    accepted="vllm:spec_decode_num_accepted_tokens_total",
    drafted="vllm:spec_decode_num_draft_tokens_total",
    model_label="model_name",
)


class Vllm(SignalSource):
    """vLLM's own metrics, per release."""

    name = "vllm"
    short = "vLLM"
    title = "vLLM's own metrics"
    upstream = "vllm-project/vllm vllm/v1/metrics/loggers.py and buckets.py (see vllm_releases.py per release)"
    METRICS = vllm_releases.metrics(vllm_releases.DEFAULT_VERSION)
    # vLLM counts requests its admission control refused (reason max_num_queued_reqs or max_num_queued_tokens).
    failure_reason_example = "max_num_queued_reqs"
    draft_acceptance: ClassVar[DraftAcceptance | None] = DRAFT_ACCEPTANCE
    lacks_note = "request class (one class per model); failures before the first token other than rejections"
    deploys_engine = True

    def lacks(self, sli: Sli) -> str:
        if sli is Sli.TPOT:
            return (
                "this vLLM release has no per-request time per output token histogram "
                "(vllm:request_time_per_output_token_seconds arrived in 0.11); use itl (read from "
                "vllm:time_per_output_token_seconds, which measures the time between engine iterations) or set "
                "vllm.version to 0.11 or later once you run it"
            )
        return super().lacks(sli)

    def metrics(self, vllm: VllmSettings) -> SourceMetrics:
        return vllm_releases.metrics(vllm.version)

    def fixed_buckets(self, vllm: VllmSettings, sli: Sli) -> tuple[float, ...] | None:
        return vllm.buckets(sli)

    def alignment_problems(self, draft: Draft) -> list[Problem]:
        """Off-bucket thresholds, the first carrying one `--custom-histogram-buckets` value for the whole spec:
        every off-bucket threshold of a family merged into that family's list, so the user runs vLLM with one
        flag value, not one per threshold."""
        vllm = draft.vllm
        off = [
            (sli, fpath, seconds)
            for sli, slo, path in slo_paths(draft.classes)
            for fpath, seconds in threshold_places(slo, path)
            if sli in self.metrics(vllm).latency
            and not any(math.isclose(seconds, b, rel_tol=1e-9) for b in vllm.buckets(sli))
        ]
        merged: dict[str, set[float]] = {}
        for sli, _, seconds in off:
            merged.setdefault(vllm_releases.SLI_FAMILY[sli], set(vllm.buckets(sli))).add(seconds)
        flag = json.dumps(
            {family: [float(format_le(b)) for b in sorted(values)] for family, values in sorted(merged.items())},
            separators=(",", ":"),
        )
        return [
            self._alignment_problem(vllm, sli, fpath, seconds, flag if position == 0 else None)
            for position, (sli, fpath, seconds) in enumerate(off)
        ]

    def _alignment_problem(
        self, vllm: VllmSettings, sli: Sli, fpath: tuple[str | int, ...], seconds: float, flag: str | None
    ) -> Problem:
        """One off-bucket threshold; the first one carries the merged flag, the others point at it."""
        family = vllm_releases.SLI_FAMILY[sli]
        metric = self.metrics(vllm).latency[sli].removeprefix("vllm:")
        if not vllm_releases.RELEASES[vllm.version].custom_histogram_buckets:
            how = f"or upgrade to vLLM {vllm_releases.CUSTOM_BUCKETS_SINCE} for --custom-histogram-buckets"
        elif flag is not None:
            how = (
                f"or run vLLM with --custom-histogram-buckets '{flag}' (one list for every off-bucket threshold of "
                f"this spec) and declare the same lists under vllm.custom_histogram_buckets"
            )
        else:
            how = f"or add it to vllm.custom_histogram_buckets.{family} (the one --custom-histogram-buckets list above)"
        return Problem(
            fpath,
            f"{sli.value} threshold {format_duration(seconds)} is not a bucket boundary of vLLM "
            f"{vllm.version}'s {metric} histogram, so the SLI cannot be counted exactly; nearest are "
            f"{nearest_text(vllm.buckets(sli), seconds)}; use one of those, {how}",
        )

    def engine_args(self, spec: Spec) -> list[str]:
        """`--custom-histogram-buckets` with the lists the spec declares."""
        if not spec.vllm.custom_histogram_buckets:
            return []
        buckets = {
            family: [float(format_le(b)) for b in bounds]
            for family, bounds in sorted(spec.vllm.custom_histogram_buckets.items())
        }
        return ["--custom-histogram-buckets", json.dumps(buckets, separators=(",", ":"))]
