"""`slokit import` on real published Pyrra, Sloth and OpenSLO files, refusals naming the construct, exit codes,
promtool on the imported spec's rules, and the OpenSLO export's round trip.

The expected objectives below are read off the published files by hand (see tests/data/interop/README.md for
where each file comes from), not from the importer's output.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slokit.generate import generate_all
from slokit.generate.model import RecordingRule
from slokit.generate.rules import rule_groups
from slokit.generate.writer import write_files
from slokit.interop.importing import read_files, render_spec
from slokit.interop.selectors import parse_query
from slokit.local.prometheus import check_rule_files, run_rule_tests
from slokit.schema import RECORD_LATENCY_BUCKET_RATE, Sli, record_sli_good, record_sli_total
from slokit.spec import Spec, load_spec, load_spec_text

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "interop"
DAY = 86400.0


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slokit.cli", *args], capture_output=True, text=True, timeout=120, check=False
    )


def _imported(*paths: Path) -> Spec:
    result = read_files(paths)
    return load_spec_text(render_spec(result), "imported.yaml")


def _objectives(spec: Spec) -> list[tuple[float, float, float, str, frozenset[tuple[str, str, str]]]]:
    """(percentile, window, threshold, histogram, matchers) for every objective."""
    out = []
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            assert slo.objective is not None
            hist = spec.histogram(rc, sli)
            out.append((slo.objective.percentile, spec.window, slo.objective.threshold, hist.name,
                        frozenset(hist.matchers)))  # fmt: skip
    return out


# -- real published files -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("file", "expected"),
    [
        ("pyrra/caddy-response-latency.yaml",
         [(90.0, 28 * DAY, 0.05, "caddy_http_response_duration_seconds",
           {("job", "=", "caddy"), ("handler", "=", "subroute"), ("code", "!~", "5..")})]),
        ("pyrra/slo-apiserver-read-resource-latency.yaml",
         [(99.0, 14 * DAY, 0.1, "apiserver_request_sli_duration_seconds", {("verb", "=~", "LIST|GET")})]),
        ("pyrra/slo-apiserver-read-cluster-latency.yaml",
         [(99.0, 14 * DAY, 5.0, "apiserver_request_sli_duration_seconds",
           {("component", "=", "apiserver"), ("scope", "=~", "cluster|"), ("verb", "=~", "LIST|GET")})]),
        ("sloth/kubernetes-apiserver.yml",
         [(99.0, 30 * DAY, 0.4, "apiserver_request_duration_seconds", {("verb", "!=", "WATCH")})]),
        ("sloth/openslo-kubernetes-apiserver.yml",
         [(99.0, 30 * DAY, 0.4, "apiserver_request_duration_seconds", {("verb", "!=", "WATCH")}),
          (99.9, 30 * DAY, 5.0, "apiserver_request_duration_seconds", {("verb", "!=", "WATCH")})]),
    ],
)  # fmt: skip
def test_published_latency_slos_convert_to_the_right_objectives(file: str, expected: list[tuple]) -> None:  # type: ignore[type-arg]
    spec = _imported(DATA / file)
    got = _objectives(spec)
    assert len(got) == len(expected)
    for (pct, window, threshold, name, matchers), want in zip(got, expected, strict=True):
        assert (pct, window, name, matchers) == (want[0], want[1], want[3], frozenset(want[4]))
        assert math.isclose(threshold, want[2])


@pytest.mark.parametrize(
    ("file", "constructs"),
    [
        ("pyrra/prometheus-http.yaml", {"ratio SLI of error counters"}),
        ("pyrra/pyrra-connect-latency.yaml", {"native histogram"}),
        ("pyrra/prometheus-probe-success.yaml", {"boolean-gauge SLI"}),
        # pyrra/nginx.yaml's latency SLO, whose good selector adds status=~"5..", now converts with a warning
        # (tests/test_issue32_probe_plan_interop.py); only its ratio SLO is refused.
        ("sloth/getting-started.yml", {"ratio SLI of error counters"}),
        ("sloth/k8s-getting-started.yml", {"ratio SLI of error counters"}),
        ("sloth/raw-home-wifi.yml", {"raw SLI"}),
        # count(unifipoller_client_satisfaction_ratio < 0.75): a gauge compared with a number, not error counters.
        ("sloth/home-wifi.yml", {"gauge-threshold SLI"}),
        ("openslo/occurences-slo.yaml", {"threshold (raw) metric SLI"}),
        ("openslo/ratio-timeslices.yaml", {"timeslice budgeting"}),
        ("openslo/timeslices-slo.yaml", {"timeslice budgeting", "calendar window"}),
        ("openslo/calendar-timeslices-slo.yaml", {"timeslice budgeting", "calendar window"}),
    ],
)
def test_published_slos_slokit_cannot_express_are_refused_naming_the_construct(file: str, constructs: set[str]) -> None:
    result = read_files([DATA / file])
    assert not result.objectives
    assert {n.construct for n in result.notices if n.skipped} == constructs


def test_exit_status_says_all_some_or_nothing(tmp_path: Path) -> None:
    out = tmp_path / "slo.yaml"
    done = _cli("import", str(DATA / "pyrra/caddy-response-latency.yaml"), "-o", str(out))
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "pyrra/caddy-response-latency.yaml: Pyrra ServiceLevelObjective 'caddy-response-latency'" in text
    some = _cli("import", str(DATA / "sloth/kubernetes-apiserver.yml"))
    assert some.returncode == 3, some.stderr
    assert "requests-availability: skipped: ratio SLI of error counters" in some.stderr
    assert "service: k8s-apiserver" in some.stdout
    nothing = _cli("import", str(DATA / "openslo/ratio-timeslices.yaml"), str(DATA / "pyrra/prometheus-http.yaml"))
    assert nothing.returncode == 2
    assert "timeslice budgeting" in nothing.stderr and nothing.stdout == ""
    wide = subprocess.run([sys.executable, "-m", "slokit.cli", "import", "--help"], capture_output=True, text=True,
                          timeout=60, check=False, env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    # Each paragraph of the help is one line on a wide terminal: no line break inside a sentence.
    paragraphs = [line.strip() for line in wide.stdout.splitlines()[:20] if line.strip()]
    assert all(p.endswith((".", ":", "/", "...")) for p in paragraphs[1:8]), paragraphs
    missing = _cli("import", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "cannot be read" in missing.stderr and "Traceback" not in missing.stderr


def test_classes_reading_one_unlabelled_histogram_each_keep_their_own_terms() -> None:
    """Two imported objectives over the same series (no class label to tell them apart): each class's 5m tiles
    and bucket rates are their own terms, the class written on; none is folded into another's."""
    spec = _imported(*sorted(DATA.glob("*/*.y*ml")))
    records = {r.record: r.expr for g in rule_groups(spec) for r in g.rules if isinstance(r, RecordingRule)}
    for record in (record_sli_total("5m"), record_sli_good("5m"), RECORD_LATENCY_BUCKET_RATE):
        for rc in spec.classes:
            assert f'"class", "{rc.name}"' in records[record], (record, rc.name)


@pytest.mark.prometheus
def test_rules_of_an_imported_spec_pass_promtool(tmp_path: Path, promtool_path: str) -> None:
    spec = _imported(*sorted(DATA.glob("*/*.y*ml")))
    assert len(spec.classes) == 7  # nginx-api-latency converts since its good-only status matcher is dropped
    write_files({k: v for k, v in generate_all([spec]).items() if k.startswith("rules/")}, tmp_path, check=False)
    rules = tmp_path / "rules" / f"{spec.service}.rules.yaml"
    checked = check_rule_files([rules])
    assert checked.ok, checked.output
    tested = run_rule_tests([tmp_path / "rules" / f"{spec.service}.rules.test.yaml"])
    assert tested.ok, tested.output[-4000:]
    # The rules read the published SLO's own series and selector.
    text = rules.read_text()
    assert 'caddy_http_response_duration_seconds_bucket{job="caddy",handler="subroute",code!~"5.."}' in text


@pytest.mark.prometheus
def test_imported_slos_reading_overlapping_series_pass_promtool(tmp_path: Path, promtool_path: str) -> None:
    """Pyrra's resource-latency SLO (verb=~"LIST|GET", 100ms) also reads the series of its cluster-latency SLO
    (the same verbs and scope="cluster", 5s): the generated tests' healthy scenario must be healthy for both."""
    spec_path = tmp_path / "apiserver.yaml"
    done = _cli("import", str(DATA / "pyrra/slo-apiserver-read-cluster-latency.yaml"),
                str(DATA / "pyrra/slo-apiserver-read-resource-latency.yaml"), "-o", str(spec_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = _cli("generate", str(spec_path), "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    rules = tmp_path / "out" / "rules" / "monitoring.rules.yaml"
    checked = check_rule_files([rules])
    assert checked.ok, checked.output
    tested = run_rule_tests([rules.with_name("monitoring.rules.test.yaml")])
    assert tested.ok, tested.output[-4000:]


# -- hand-written documents (not published files) for the other shapes ---------------------------------------
OPENSLO_V1 = """
- apiVersion: openslo/v1
  kind: DataSource
  metadata: {name: prom}
  spec: {type: Prometheus, connectionDetails: {url: http://prometheus:9090}}
- apiVersion: openslo/v1
  kind: SLI
  metadata: {name: ttft-good}
  spec:
    ratioMetric:
      counter: true
      bad:
        metricSource:
          metricSourceRef: prom
          spec:
            query: >-
              sum(rate(gw_ttft_milliseconds_count{route="chat"}[5m]))
              - sum(rate(gw_ttft_milliseconds_bucket{route="chat",le="750"}[5m]))
      total:
        metricSource: {metricSourceRef: prom, spec: {query: 'sum(rate(gw_ttft_milliseconds_count{route="chat"}[5m]))'}}
- apiVersion: openslo/v1
  kind: SLO
  metadata: {name: chat-ttft}
  spec:
    service: gateway
    indicatorRef: ttft-good
    timeWindow: [{duration: 7d, isRolling: true}]
    budgetingMethod: Occurrences
    objectives: [{target: 0.975}]
- apiVersion: openslo/v1
  kind: SLO
  metadata: {name: monthly}
  spec:
    service: gateway
    indicatorRef: ttft-good
    timeWindow: [{duration: 1M, isRolling: true}]
    objectives: [{target: 0.9}]
- apiVersion: openslo/v1
  kind: SLO
  metadata: {name: native}
  spec:
    service: gateway
    indicator:
      metadata: {name: native}
      spec:
        ratioMetric:
          good: {metricSource: {type: Prometheus, spec: {query: 'histogram_fraction(0, 0.5, rate(x[5m]))'}}}
          total: {metricSource: {type: Prometheus, spec: {query: 'histogram_count(rate(x[5m]))'}}}
    timeWindow: [{duration: 28d, isRolling: true}]
    objectives: [{targetPercent: 99}]
- apiVersion: openslo/v1
  kind: SLO
  metadata: {name: datadog}
  spec:
    service: gateway
    indicator:
      metadata: {name: dd}
      spec:
        ratioMetric:
          good: {metricSource: {type: Datadog, spec: {query: 'sum:trace.ok{*}'}}}
          total: {metricSource: {type: Datadog, spec: {query: 'sum:trace.hits{*}'}}}
    objectives: [{target: 0.99}]
"""


def test_openslo_v1_list_with_indicator_ref_bad_query_and_milliseconds(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(OPENSLO_V1)
    result = read_files([path])
    assert [n.construct for n in result.notices if n.skipped] == ["calendar window", "native histogram",
                                                                   "metric source"]  # fmt: skip
    spec = load_spec_text(render_spec(result))
    assert spec.service == "gateway" and spec.window == 7 * DAY
    rc = spec.classes[0]
    hist = spec.histogram(rc, Sli.TTFT)
    assert (hist.name, hist.scale, hist.matchers) == ("gw_ttft_milliseconds", 0.001, (("route", "=", "chat"),))
    objective = rc.slos[Sli.TTFT].objective
    assert objective is not None
    assert math.isclose(objective.threshold, 0.75) and objective.percentile == 97.5
    assert result.exit_code == 3


PYRRA_GROUPING = """
apiVersion: pyrra.dev/v1alpha1
kind: ServiceLevelObjective
metadata: {name: api-latency}
spec:
  target: "99"
  window: 4w
  indicator:
    latency:
      success: {metric: 'http_request_duration_seconds_bucket{job="api",le="0.5"}'}
      total: {metric: 'http_request_duration_seconds_count{job="api"}'}
      grouping: [route]
---
version: prometheus/v1
service: api
slos:
  - name: sloth-latency
    objective: 99.5
    sli:
      events:
        error_query: >-
          sum by (handler) (rate(http_request_duration_seconds_count{job="api"}[{{.window}}]))
          - sum by (handler) (rate(http_request_duration_seconds_bucket{job="api",le="1"}[{{.window}}]))
        total_query: sum by (handler) (rate(http_request_duration_seconds_count{job="api"}[{{.window}}]))
"""


def test_grouping_is_dropped_with_a_warning_and_a_comment(tmp_path: Path) -> None:
    """Pyrra `grouping:` and PromQL `by (...)` are not kept: the objective is over all selected series (written
    document, not a published file)."""
    path = tmp_path / "grouped.yaml"
    path.write_text(PYRRA_GROUPING)
    result = read_files([path])
    grouping = [n for n in result.notices if n.construct == "grouping"]
    assert [(n.slo, n.skipped) for n in grouping] == [("api-latency", False), ("sloth-latency", False)]
    assert "by (route) is not kept" in str(grouping[0]) and "by (handler) is not kept" in str(grouping[1])
    assert result.exit_code == 0
    text = render_spec(result)
    assert "grouped by (route) there" in text and "grouped by (handler) there" in text
    spec = load_spec_text(text)
    assert [spec.histogram(rc, Sli.E2E).matchers for rc in spec.classes] == [(("job", "=", "api"),)] * 2
    done = _cli("import", str(path))
    assert done.returncode == 0 and "grouping: by (route) is not kept" in done.stderr


# -- export -----------------------------------------------------------------------------------------------------
ROUND_TRIP = [*sorted((ROOT / "examples").glob("*.yaml")), *sorted((DATA.parent / "engines").glob("*.yaml"))]


@pytest.mark.parametrize("spec_path", ROUND_TRIP, ids=[p.stem for p in ROUND_TRIP])
def test_import_of_the_openslo_export_gives_back_the_same_objectives(spec_path: Path, tmp_path: Path) -> None:
    original = load_spec(spec_path)
    exported = tmp_path / "export.yaml"
    done = _cli("export", "openslo", str(spec_path), "-o", str(exported))
    assert done.returncode == 0, done.stderr
    text = exported.read_text()
    assert text.count("kind: SLO\n") == sum(1 for rc in original.classes for s in rc.slos.values() if s.objective)
    back = _imported(exported)
    assert back.service == original.service and back.window == original.window

    def objectives(spec: Spec) -> set[tuple[str, str, float, float, str, str | None, float, tuple[str, ...]]]:
        out = set()
        for rc in spec.classes:
            for sli, slo in rc.slos.items():
                if slo.objective is None:
                    continue
                hist = spec.histogram(rc, sli)
                out.add((rc.name, sli.value, slo.objective.percentile, round(slo.objective.threshold, 9), hist.name,
                         hist.model_label, hist.scale, tuple(sorted(rc.models))))  # fmt: skip
        return out

    assert objectives(back) == objectives(original)


WHOLE_SECONDS = """
version: slokit/v1
service: gateway
window: 28d
models:
  - {name: llama-3-8b}
classes:
  - name: chat
    slos:
      e2e:
        metric: {histogram: http_request_duration_seconds, model_label: upstream, selector: {job: gateway}}
        objective: {percentile: 99, threshold: 5s}
"""


def test_openslo_export_matches_both_spellings_of_a_whole_bound_and_round_trips(tmp_path: Path) -> None:
    """A 5 s bound is `le="5.0"` from Python clients and `le="5"` from Go clients (Prometheus 2 keeps the
    exposition's text): the export uses the rules' matcher, and importing it keeps the threshold."""
    spec_path = tmp_path / "gateway.yaml"
    spec_path.write_text(WHOLE_SECONDS)
    exported = tmp_path / "export.yaml"
    done = _cli("export", "openslo", str(spec_path), "-o", str(exported))
    assert done.returncode == 0, done.stderr
    sli = next(d for d in yaml.safe_load_all(exported.read_text()) if d["kind"] == "SLI")
    good = parse_query(sli["spec"]["ratioMetric"]["good"]["metricSource"]["spec"]["query"])
    (bucket,) = good.selectors
    assert bucket.name == "http_request_duration_seconds_bucket"
    ((_, op, regex),) = bucket.on("le")
    assert op == "=~" and all(re.fullmatch(regex, text) for text in ("5", "5.0"))
    assert not re.fullmatch(regex, "5x0")  # the dot is escaped
    back = _imported(exported)
    objective = back.classes[0].slos[Sli.E2E].objective
    assert objective is not None and math.isclose(objective.threshold, 5.0) and objective.percentile == 99.0
    hist = back.histogram(back.classes[0], Sli.E2E)
    assert (hist.name, hist.model_label, hist.matchers) == ("http_request_duration_seconds", "upstream",
                                                            (("job", "=", "gateway"),))  # fmt: skip
