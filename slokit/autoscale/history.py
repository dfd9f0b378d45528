"""Read a request history into request rates and token means per model and class, over time.

Sources:

* an OpenMetrics file as `slokit simulate` writes it (or any scrape dump in that form): the spec's finished-request
  counter per model (and class, where the source labels one) and its prompt and generation token counters, read
  as reset-aware deltas between consecutive samples and summed over pods;
* a probe's `requests.csv` (`slokit probe -o DIR`): each request's scheduled time and token counts, levels and runs
  laid end to end as the probe ran them, for the class and model its probe.json names.

Token counters carry no class, so each class of a model gets the model's mean prompt and output tokens per
request at each step; the spread around those means is the class's `workload:` shape in the spec (a log-normal of
sigma 0.6 where it has none). A spec model that runs classes but has no request in the history is an error: its
replay would say nothing, and a silently empty comparison reads as "every policy met the SLO".
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TextIO

from slokit.autoscale.engine import Workload
from slokit.distributions import Distribution
from slokit.spec import Spec

SAMPLE_SIZE: Final = 64  # token-count sample per class (sorted quantiles of its workload shape)
DEFAULT_PROMPT_TOKENS: Final = 1000.0
DEFAULT_OUTPUT_TOKENS: Final = 250.0
DEFAULT_SIGMA: Final = 0.6
PROBE_STEP: Final = 10.0  # seconds per bin of a probe log
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+(\S+))?\s*$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


class HistoryError(ValueError):
    """A history that cannot be replayed; the message names the file, what is wrong and what would be right."""


@dataclass
class ClassTraffic:
    """One (model, class): requests/s and mean prompt and output tokens at each step of the history."""

    model: str
    request_class: str
    rate: list[float]
    prompt_mean: list[float]
    output_mean: list[float]
    shape: Workload  # the token-count spread, at its own means (scaled per step)

    def workload(self, index: int) -> Workload:
        """The class's token sample at step `index` (the shape scaled to that step's means)."""
        return self.shape.scaled(self.prompt_mean[index], self.output_mean[index])


@dataclass
class Traffic:
    """A whole history: start (unix seconds, 0 for a probe log), step seconds and every (model, class)."""

    source: str
    start: float
    step: float
    classes: list[ClassTraffic] = field(default_factory=list)

    @property
    def steps(self) -> int:
        """Number of steps."""
        return len(self.classes[0].rate) if self.classes else 0

    @property
    def models(self) -> list[str]:
        """The models, in first-seen order."""
        return list(dict.fromkeys(c.model for c in self.classes))

    def of_model(self, model: str) -> list[ClassTraffic]:
        """The classes of one model."""
        return [c for c in self.classes if c.model == model]


def class_shape(spec: Spec, class_name: str) -> Workload:
    """A fixed sorted sample of a class's prompt and output tokens (its `workload:`, or a log-normal default)."""
    rc = spec.request_class(class_name)
    rng = random.Random(f"slokit-autoscale-{class_name}")
    if rc.workload is not None:
        prompt_dist, output_dist = rc.workload.prompt_tokens, rc.workload.output_tokens
    else:
        prompt_dist = Distribution("lognormal", (DEFAULT_PROMPT_TOKENS, DEFAULT_SIGMA))
        output_dist = Distribution("lognormal", (DEFAULT_OUTPUT_TOKENS, DEFAULT_SIGMA))
    prompts = sorted(float(prompt_dist.sample(rng)) for _ in range(SAMPLE_SIZE))
    outputs = sorted(float(output_dist.sample(rng)) for _ in range(SAMPLE_SIZE))
    return Workload(tuple(prompts), tuple(outputs))


def _parse_labels(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    return {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL.findall(text)}


def read_openmetrics(spec: Spec, path: Path) -> Traffic:
    """The history in an OpenMetrics file (`slokit simulate`'s output)."""
    metrics = spec.metrics
    wanted = {metrics.requests_finished, metrics.prompt_tokens, metrics.generation_tokens}
    model_label = metrics.model_label
    # (metric, series labels) -> [(t, value)]
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = defaultdict(list)
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise HistoryError(f"--traffic {path}: cannot read it: {exc.strerror or exc}") from None
    with handle:
        for number, line in enumerate(handle, 1):
            if not line or line[0] == "#" or not line.startswith(tuple(wanted)):
                continue
            match = _SAMPLE.match(line)
            if match is None or match.group(1) not in wanted:
                continue
            if match.group(4) is None:
                raise HistoryError(
                    f"{path}:{number}: sample of {match.group(1)} has no timestamp; a history needs `name{{labels}} "
                    "value timestamp` lines, as `slokit simulate` writes them"
                )
            try:
                value, stamp = float(match.group(3)), float(match.group(4))
            except ValueError:
                raise HistoryError(f"{path}:{number}: value or timestamp is not a number: {line.strip()!r}") from None
            labels = _parse_labels(match.group(2))
            samples[(match.group(1), tuple(sorted(labels.items())))].append((stamp, value))
    if not samples:
        raise HistoryError(
            f"{path}: no {metrics.requests_finished} samples; the history must hold the spec's finished-request "
            f"counter ({spec.source.name} source) with timestamps, as `slokit simulate {spec.path or 'SPEC'}` writes"
        )
    stamps = sorted({t for points in samples.values() for t, _ in points})
    step = min((b - a for a, b in itertools.pairwise(stamps) if b > a), default=60.0)
    start = stamps[0]
    bins = round((stamps[-1] - start) / step)
    if bins < 1:
        raise HistoryError(f"{path}: one timestamp only; a history needs at least two scrapes to give a rate")

    def deltas(points: list[tuple[float, float]]) -> Iterable[tuple[int, float]]:
        points.sort()
        for (t0, v0), (t1, v1) in itertools.pairwise(points):
            delta = v1 - v0 if v1 >= v0 else v1  # a reset: the counter restarted from zero
            index = min(bins - 1, round((t1 - start) / step) - 1)
            span = max(1, round((t1 - t0) / step))
            for k in range(span):  # a missed scrape spreads its delta over the gap
                if 0 <= index - k < bins:
                    yield index - k, delta / span

    requests: dict[tuple[str, str | None], list[float]] = defaultdict(lambda: [0.0] * bins)
    tokens: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0] * bins)
    served = {m.name for m in spec.models}
    for (metric, key), points in samples.items():
        labels = dict(key)
        model = labels.get(model_label) if model_label is not None else spec.models[0].name
        if model is None or model not in served:
            continue
        if metric == metrics.requests_finished:
            klass = labels.get(metrics.class_label) if metrics.class_label is not None else None
            target = requests[(model, klass)]
        else:
            target = tokens[(model, "prompt" if metric == metrics.prompt_tokens else "output")]
        for index, delta in deltas(points):
            target[index] += delta
    traffic = Traffic(str(path), start, step)
    for served_model in spec.models:
        model_name = served_model.name
        classes = spec.classes_on(model_name)
        if not classes:
            continue
        total = [0.0] * bins
        for (m, _), counts in requests.items():
            if m == model_name:
                total = [a + b for a, b in zip(total, counts, strict=True)]
        prompts = _means(tokens.get((model_name, "prompt")), total, DEFAULT_PROMPT_TOKENS)
        outputs = _means(tokens.get((model_name, "output")), total, DEFAULT_OUTPUT_TOKENS)
        for rc in classes:
            own = requests.get((model_name, rc.name))
            # No class label in the source: the model's classes share its requests evenly.
            counts = own if own is not None else [c / len(classes) for c in requests.get((model_name, None), total)]
            rate = [c / step for c in counts]
            shape = class_shape(spec, rc.name)
            traffic.classes.append(ClassTraffic(model_name, rc.name, rate, prompts, outputs, shape))
    return traffic


def _means(tokens: Sequence[float] | None, requests: Sequence[float], default: float) -> list[float]:
    """Tokens per request at each step; where a step has no requests or no counter, the history's overall mean."""
    if tokens is None or sum(requests) <= 0:
        return [default] * len(requests)
    overall = sum(tokens) / sum(requests) if sum(tokens) > 0 else default
    return [t / r if r > 0.5 and t > 0 else overall for t, r in zip(tokens, requests, strict=True)]


def read_probe_log(spec: Spec, path: Path) -> Traffic:
    """The history in a probe's requests.csv: arrivals at each request's scheduled time, binned in PROBE_STEP."""
    import csv

    try:
        rows = list(csv.DictReader(path.open(encoding="utf-8")))
    except OSError as exc:
        raise HistoryError(f"--traffic {path}: cannot read it: {exc.strerror or exc}") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise HistoryError(f"{path}: not a CSV file ({exc})") from None
    needed = ("level", "run", "t_sched", "prompt_tokens", "output_tokens")
    if not rows or any(c not in rows[0] for c in needed):
        raise HistoryError(f"{path}: needs the columns {', '.join(needed)} (the requests.csv of `slokit probe -o DIR`)")
    document: dict[str, object] = {}
    sidecar = path.with_name("probe.json")
    if sidecar.exists():
        try:
            document = json.loads(sidecar.read_text(encoding="utf-8"))
        except ValueError:
            document = {}
    names = [rc.name for rc in spec.classes]
    chosen = str(document.get("class") or names[0])
    if chosen not in names:
        raise HistoryError(
            f"{sidecar}: class {chosen!r} is not in {spec.path or 'the spec'} (classes: {', '.join(names)})"
        )
    rc = spec.request_class(chosen)
    model = str(document["model"]) if document.get("model") in rc.models else rc.models[0]
    offsets: dict[tuple[str, str], float] = {}
    arrivals: list[tuple[float, float, float]] = []
    cursor = 0.0
    by_run: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        by_run[(row["level"], row["run"])].append(row)
    for key in sorted(by_run, key=lambda k: (int(k[0]), int(k[1]))):
        offsets[key] = cursor
        last = 0.0
        for row in by_run[key]:
            t = _number(row["t_sched"])
            if not math.isfinite(t):
                continue
            last = max(last, t, _number(row.get("t_done", "")))
            arrivals.append((cursor + t, _number(row["prompt_tokens"]), _number(row["output_tokens"])))
        cursor += last + 1.0
    if not arrivals:
        raise HistoryError(f"{path}: no request was scheduled; nothing to replay")
    bins = max(1, math.ceil(cursor / PROBE_STEP))
    counts, prompts, outputs = [0.0] * bins, [0.0] * bins, [0.0] * bins
    for t, p, o in arrivals:
        i = min(bins - 1, int(t // PROBE_STEP))
        counts[i] += 1
        prompts[i] += p if math.isfinite(p) else 0.0
        outputs[i] += o if math.isfinite(o) else 0.0
    traffic = Traffic(str(path), 0.0, PROBE_STEP)
    traffic.classes.append(
        ClassTraffic(
            model,
            chosen,
            [c / PROBE_STEP for c in counts],
            _means(prompts, counts, DEFAULT_PROMPT_TOKENS),
            _means(outputs, counts, DEFAULT_OUTPUT_TOKENS),
            class_shape(spec, chosen),
        )
    )
    return traffic


def _number(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "") else math.nan
    except ValueError:
        return math.nan


def read_history(spec: Spec, path: Path, models: Sequence[str] = ()) -> Traffic:
    """Read `path` (OpenMetrics or a probe's requests.csv) and check that every model replayed has traffic."""
    if path.is_dir():
        path = path / "requests.csv"
    traffic = read_probe_log(spec, path) if path.suffix == ".csv" else read_openmetrics(spec, path)
    wanted = list(models) or [m.name for m in spec.models if spec.classes_on(m.name)]
    if path.suffix == ".csv" and not models:
        wanted = traffic.models  # a probe ran one class on one model: the others were not probed
    unknown = [m for m in wanted if m not in {x.name for x in spec.models}]
    if unknown:
        raise HistoryError(
            f"--model {', '.join(unknown)}: not a model of {spec.path or 'the spec'} "
            f"(models: {', '.join(m.name for m in spec.models)})"
        )
    for model in wanted:
        classes = traffic.of_model(model)
        if not classes or sum(sum(c.rate) for c in classes) <= 0:
            raise HistoryError(
                f"{path}: no requests for model {model!r} in the history (read {spec.metrics.requests_finished} "
                f"per {spec.metrics.model_label or 'model'}); replay a history of that model, or name the models to "
                "replay with --model"
            )
    traffic.classes = [c for c in traffic.classes if c.model in wanted]
    return traffic


def write_openmetrics(spec: Spec, traffic: Traffic, out: TextIO) -> None:
    """Write a history as the counters `read_openmetrics` reads (one pod per model): for shaped traffic (a ramp)
    that no simulate run produces."""
    metrics = spec.metrics
    steps = traffic.steps
    out.write(f"# TYPE {metrics.requests_finished.removesuffix('_total')} counter\n")
    totals: dict[str, list[float]] = {}
    token_sums: dict[str, tuple[list[float], list[float]]] = {}
    for c in traffic.classes:
        labels = {**({metrics.model_label: c.model} if metrics.model_label else {}), "pod": f"{c.model}-0"}
        if metrics.class_label is not None:
            labels[metrics.class_label] = c.request_class
        if metrics.finish_reason_label:
            labels[metrics.finish_reason_label] = "stop"
        text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        value = 0.0
        out.write(f"{metrics.requests_finished}{{{text}}} 0 {traffic.start:.0f}\n")
        per = totals.setdefault(c.model, [0.0] * steps)
        ps, os_ = token_sums.setdefault(c.model, ([0.0] * steps, [0.0] * steps))
        for i in range(steps):
            count = c.rate[i] * traffic.step
            value += count
            per[i] += count
            ps[i] += count * c.prompt_mean[i]
            os_[i] += count * c.output_mean[i]
            out.write(
                f"{metrics.requests_finished}{{{text}}} {value:.6g} {traffic.start + (i + 1) * traffic.step:.0f}\n"
            )
    for metric, index in ((metrics.prompt_tokens, 0), (metrics.generation_tokens, 1)):
        out.write(f"# TYPE {metric.removesuffix('_total')} counter\n")
        for model, sums in token_sums.items():
            labels = {**({metrics.model_label: model} if metrics.model_label else {}), "pod": f"{model}-0"}
            text = ",".join(f'{k}="{v}"' for k, v in labels.items())
            value = 0.0
            out.write(f"{metric}{{{text}}} 0 {traffic.start:.0f}\n")
            for i in range(steps):
                value += sums[index][i]
                out.write(f"{metric}{{{text}}} {value:.6g} {traffic.start + (i + 1) * traffic.step:.0f}\n")
    out.write("# EOF\n")


def shaped(spec: Spec, model: str, points: Mapping[float, float], *, step: float = 60.0, start: float = 0.0) -> Traffic:
    """Traffic for one model that follows a piecewise-linear rate (`{seconds from start: total req/s}`), split
    evenly over the model's classes at their workload means: a ramp like llm-d's 2 -> 10 -> 1 req/s."""
    times = sorted(points)
    steps = int(times[-1] // step)
    traffic = Traffic("shaped", start, step)
    classes = spec.classes_on(model)
    for rc in classes:
        shape = class_shape(spec, rc.name)
        rate = []
        for i in range(steps):
            t = (i + 0.5) * step
            j = max(0, min(len(times) - 2, next((k for k in range(len(times) - 1) if times[k + 1] >= t), 0)))
            a, b = times[j], times[j + 1]
            value = points[a] + (points[b] - points[a]) * (t - a) / (b - a)
            rate.append(value / len(classes))
        traffic.classes.append(
            ClassTraffic(model, rc.name, rate, [shape.prompt_mean] * steps, [shape.output_mean] * steps, shape)
        )
    return traffic
