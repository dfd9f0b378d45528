"""Every validation error a user can hit: each names the file, line, column and field, and says what would be right."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from slokit.schema import Sli
from slokit.spec import SpecError, SpecIssue, load_spec, load_spec_text

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.yaml"))

MINIMAL = """\
version: slokit/v1
service: svc
models:
  - name: m
classes:
  - name: chat
    slos:
      ttft:
        objective: {percentile: 95, threshold: 500ms}
"""


def issues_of(text: str) -> list[SpecIssue]:
    with pytest.raises(SpecError) as caught:
        load_spec_text(textwrap.dedent(text), "spec.yaml")
    return list(caught.value.issues)


def only_issue(text: str) -> SpecIssue:
    found = issues_of(text)
    assert len(found) == 1, "\n".join(map(str, found))
    return found[0]


def with_line(base: str, old: str, new: str) -> str:
    assert old in base, old
    return base.replace(old, new, 1)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_valid(path: Path) -> None:
    spec = load_spec(path)
    assert spec.classes and spec.models


def test_minimal_spec_defaults() -> None:
    spec = load_spec_text(MINIMAL, "spec.yaml")
    assert spec.source.name == "slokit"
    assert spec.window == 28 * 86400
    assert [w.long for w in spec.alerting.burn_rates] == [3600, 6 * 3600, 86400, 3 * 86400]
    assert spec.alerting.severity.page == "critical"
    assert spec.request_class("chat").match.header == "chat"
    assert spec.request_class("chat").models == ("m",)
    objective = spec.request_class("chat").slos[Sli.TTFT].objective
    assert objective is not None
    assert objective.error_budget == pytest.approx(0.05)


def test_burn_rate_factors_scale_with_window() -> None:
    spec = load_spec_text(MINIMAL.replace("service: svc", "service: svc\nwindow: 30d"), "s.yaml")
    assert [round(w.factor(spec.window), 3) for w in spec.alerting.burn_rates] == [14.4, 6.0, 3.0, 1.0]
    spec28 = load_spec_text(MINIMAL, "s.yaml")
    assert [round(w.factor(spec28.window), 3) for w in spec28.alerting.burn_rates] == [13.44, 5.6, 2.8, 0.933]


def test_location_points_at_the_value() -> None:
    issue = only_issue(with_line(MINIMAL, "threshold: 500ms", "threshold: 500"))
    assert (issue.location.file, issue.location.line) == ("spec.yaml", 9)
    assert issue.location.column == MINIMAL.splitlines()[8].index("500ms") + 1
    assert issue.field == "classes[0].slos.ttft.objective.threshold"
    assert "has no unit" in issue.message and "500ms" in issue.message
    assert str(issue).startswith("spec.yaml:9:")


def test_unknown_key_suggests_the_close_one() -> None:
    issue = only_issue(with_line(MINIMAL, "service: svc", "service: svc\nwindw: 28d"))
    assert issue.field == "windw"
    assert "did you mean 'window'" in issue.message
    assert issue.location.line == 3


def test_unknown_key_without_close_match_lists_allowed() -> None:
    issue = only_issue(with_line(MINIMAL, "  - name: m\n", "  - name: m\n    zzz: 1\n"))
    assert "expected one of" in issue.message and "tensor_parallel" in issue.message


def test_all_errors_are_reported_in_one_run() -> None:
    text = with_line(MINIMAL, "version: slokit/v1", "version: slokit/v9")
    text = with_line(text, "service: svc", "service: Bad Name")
    text = with_line(text, "percentile: 95", "percentile: 100")
    found = issues_of(text)
    assert [i.field for i in found] == ["version", "service", "classes[0].slos.ttft.objective.percentile"]


@pytest.mark.parametrize(
    ("old", "new", "field", "words"),
    [
        ("version: slokit/v1", "version: v1", "version", "slokit/v1"),
        ("service: svc", "service: Svc", "service", "lower-case"),
        ("service: svc", "service: svc\nsource: prom", "source", "'slokit'"),
        ("service: svc", "service: svc\nwindow: 2d", "window", "longest alert window"),
        ("service: svc", "service: svc\nwindow: -1d", "window", "not a duration"),
        ("  - name: m\n", "  - name: m\n    gpu: h100\n", "models[0].gpu", "did you mean 'h100-pcie' or 'h100-sxm'?"),
        ("  - name: m\n", "  - name: m\n    gpu: H100\n", "models[0].gpu", "did you mean 'h100-pcie' or 'h100-sxm'?"),
        ("  - name: m\n", "  - name: m\n    gpu: a100\n", "models[0].gpu", "'a100-40gb' or 'a100-80gb'?"),
        ("  - name: m\n", "  - name: m\n    gpu: h20\n", "models[0].gpu", "did you mean 'h200'?"),
        ("  - name: m\n", "  - name: m\n    tensor_parallel: 0\n", "models[0].tensor_parallel", ">= 1"),
        ("  - name: m\n", "  - name: m\n    tensor_parallel: 2.5\n", "models[0].tensor_parallel", "integer"),
        ("  - name: m\n", "  - name: m\n    preset: llama-70b\n", "models[0].preset", "llama-3-70b"),
        ("  - name: m\n", "  - name: m\n  - name: m\n", "models[1].name", "duplicate model"),
        ("  - name: chat\n", "  - name: other\n", "classes[0].name", "reserved"),
        ("  - name: chat\n", "  - name: chat\n    models: [nope]\n", "classes[0].models[0]", "not a model"),
        ("  - name: chat\n", "  - name: chat\n    match: {prompt_tokens: {min: 10, max: 5}}\n",
         "classes[0].match.prompt_tokens.max", "larger than min"),
        ("  - name: chat\n", "  - name: chat\n    match: {priority: high}\n", "classes[0].match.priority", "integer"),
        ("  - name: chat\n", "  - name: chat\n    match: {header: 'bad value!'}\n", "classes[0].match.header",
         "header value"),
        ("  - name: chat\n", "  - name: chat\n    workload: {prompt_tokens: gauss(1), output_tokens: 10}\n",
         "classes[0].workload.prompt_tokens", "uniform("),
        ("      ttft:\n", "      ttfb:\n", "classes[0].slos.ttfb", "did you mean 'ttft'"),
        ("percentile: 95", "percentile: 0", "classes[0].slos.ttft.objective.percentile", "> 0"),
        ("percentile: 95", "percentile: yes", "classes[0].slos.ttft.objective.percentile", "boolean"),
        ("threshold: 500ms", "threshold: 0ms", "classes[0].slos.ttft.objective.threshold", "longer than"),
        ("threshold: 500ms", "threshold: fast", "classes[0].slos.ttft.objective.threshold", "not a duration"),
        ("        objective: {percentile: 95, threshold: 500ms}\n", "        {}\n", "classes[0].slos.ttft",
         "objective, tiers"),
        ("        objective: {percentile: 95, threshold: 500ms}\n",
         "        consistency: {max_p99_over_p50: 0.9}\n",
         "classes[0].slos.ttft.consistency.max_p99_over_p50", "> 1"),
        ("service: svc", "service: svc\nalerting: {runbook_url: 'https://x/{svc}'}", "alerting.runbook_url",
         "{service}"),
        ("service: svc", "service: svc\nalerting: {runbook_url: 'https://x/'}", "alerting.runbook_url", "{alert}"),
        ("service: svc", "service: svc\nalerting: {baseline: {ratio: 0.5}}", "alerting.baseline.ratio", "> 1"),
        ("service: svc", "service: svc\nalerting: {baseline: {median_days: 1}}", "alerting.baseline.median_days",
         "at least 2"),
        ("service: svc", "service: svc\nalerting: {scale_out: {fraction_of_slo: 1.5}}",
         "alerting.scale_out.fraction_of_slo", "<= 1"),
        ("service: svc", "service: svc\nalerting: {labels: {severity: x}}", "alerting.labels.severity",
         "set by slokit"),
        ("service: svc", "service: svc\nalerting: {labels: {'bad-name': x}}", "alerting.labels.bad-name",
         "label name"),
        ("service: svc", "service: svc\nalerting:\n  burn_rates:\n    - {severity: page, long: 1h, short: 2h, "
         "budget_percent: 2}", "alerting.burn_rates[0].short", "shorter than long"),
        ("service: svc", "service: svc\nalerting:\n  burn_rates:\n    - {severity: pager, long: 1h, short: 5m, "
         "budget_percent: 2}", "alerting.burn_rates[0].severity", "'page' or 'ticket'"),
        ("service: svc", "service: svc\nalerting:\n  burn_rates:\n    - {severity: page, long: 1h, short: 5m, "
         "budget_percent: 200}", "alerting.burn_rates[0].budget_percent", "<= 100"),
        ("service: svc", "service: svc\nvllm: {version: '0.7'}", "vllm.version", "known versions"),
    ],
)  # fmt: skip
def test_each_error(old: str, new: str, field: str, words: str) -> None:
    found = issues_of(with_line(MINIMAL, old, new))
    fields = [i.field for i in found]
    assert field in fields, "\n".join(map(str, found))
    issue = found[fields.index(field)]
    assert words in issue.message, str(issue)
    assert issue.location.file == "spec.yaml" and issue.location.line >= 1


def test_missing_required_keys() -> None:
    found = issues_of("version: slokit/v1\n")
    messages = " ".join(i.message for i in found)
    for key in ("service", "models", "classes"):
        assert f"missing required key {key!r}" in messages


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "empty"),
        ("- a\n- b\n", "mapping"),
        ("version: [unclosed\n", "YAML syntax error"),
        ("a: 1\na: 2\n", "duplicate key 'a'"),
        ("a: !!python/object:os.system {}\n", "YAML"),
        ("? [a, b]\n: 1\n", "must be a plain value"),
    ],
)
def test_broken_yaml(text: str, words: str) -> None:
    found = issues_of(text)
    assert any(words in i.message for i in found), "\n".join(map(str, found))


def test_tier_order() -> None:
    text = with_line(
        MINIMAL,
        "        objective: {percentile: 95, threshold: 500ms}\n",
        "        tiers:\n          target: {p95: 1s}\n          acceptable: {p95: 500ms}\n"
        "          critical: {p50: 2s, p95: 1s}\n",
    )
    found = issues_of(text)
    assert [i.field for i in found] == [
        "classes[0].slos.ttft.tiers.acceptable.p95",
        "classes[0].slos.ttft.tiers.critical.p95",
    ]
    assert "target <= acceptable <= critical" in found[0].message
    assert "higher percentile cannot be faster" in found[1].message


def test_duplicate_class_and_header() -> None:
    text = MINIMAL + "  - name: chat\n    slos: {e2e: {objective: {percentile: 99, threshold: 10s}}}\n"
    text += (
        "  - name: chat2\n    match: {header: chat}\n    slos: {e2e: {objective: {percentile: 99, threshold: 10s}}}\n"
    )
    found = issues_of(text)
    assert [i.field for i in found] == ["classes[1].name", "classes[2].match.header"]
    assert "duplicate class" in found[0].message
    assert "already selects classes[0]" in found[1].message


VLLM_BASE = """\
version: slokit/v1
service: svc
source: vllm
models: [{name: a}, {name: b}]
classes:
  - name: chat
    models: [a]
    slos:
      ttft:
        objective: {percentile: 95, threshold: 300ms}
"""


def test_bucket_alignment_names_neighbours_and_fix() -> None:
    issue = only_issue(VLLM_BASE)
    assert issue.field == "classes[0].slos.ttft.objective.threshold"
    assert "not a bucket boundary" in issue.message
    assert "nearest are 250ms and 500ms" in issue.message
    assert "--custom-histogram-buckets" in issue.message and '"time_to_first_token":[' in issue.message
    assert "0.25,0.3,0.5" in issue.message


def test_off_bucket_thresholds_get_one_merged_custom_buckets_list() -> None:
    """Three off-bucket thresholds in two classes and two families: one flag, holding every one of them."""
    text = (
        VLLM_BASE
        + """\
        tiers:
          critical: {p95: 1.2s}
  - name: code
    models: [b]
    slos:
      ttft:
        objective: {percentile: 99, threshold: 400ms}
      itl:
        objective: {percentile: 95, threshold: 30ms}
"""
    )
    with pytest.raises(SpecError) as caught:
        load_spec_text(text, "s.yaml")
    issues = caught.value.issues
    assert len(issues) == 4
    flags = [re.search(r"--custom-histogram-buckets '([^']+)'", i.message) for i in issues]
    found = [f.group(1) for f in flags if f is not None]
    assert len(found) == 1, [i.message for i in issues]
    merged = json.loads(found[0])
    ttft, itl = merged["time_to_first_token"], merged["inter_token_latency"]
    assert {0.3, 0.4, 1.2} <= set(ttft) and 0.25 in ttft and ttft == sorted(ttft)
    assert 0.03 in itl and 0.025 in itl
    assert all("not a bucket boundary" in i.message for i in issues)


def test_custom_buckets_make_threshold_valid() -> None:
    text = VLLM_BASE.replace("source: vllm", "source: vllm\nvllm:\n  custom_histogram_buckets:\n"
                             "    time_to_first_token: [0.1, 0.3, 1.0]")  # fmt: skip
    spec = load_spec_text(text, "s.yaml")
    assert spec.buckets(Sli.TTFT) == (0.1, 0.3, 1.0)


def test_custom_buckets_need_vllm_032() -> None:
    text = VLLM_BASE.replace("source: vllm", "source: vllm\nvllm:\n  version: '0.31'\n  custom_histogram_buckets:\n"
                             "    time_to_first_token: [0.1, 0.3, 1.0]")  # fmt: skip
    issue = only_issue(text)
    assert issue.field == "vllm.custom_histogram_buckets" and "0.32" in issue.message


def test_custom_buckets_must_increase() -> None:
    text = VLLM_BASE.replace("source: vllm", "source: vllm\nvllm:\n  custom_histogram_buckets:\n"
                             "    time_to_first_token: [0.5, 0.3]")  # fmt: skip
    found = issues_of(text)
    assert any("strictly increasing" in i.message for i in found)


def test_bucket_alignment_covers_tiers_and_each_family() -> None:
    text = VLLM_BASE.replace("threshold: 300ms}", "threshold: 250ms}\n        tiers: {target: {p50: 200ms}}")
    text += "      e2e:\n        objective: {percentile: 99, threshold: 250ms}\n"
    found = issues_of(text)
    assert [i.field for i in found] == [
        "classes[0].slos.ttft.tiers.target.p50",
        "classes[0].slos.e2e.objective.threshold",
    ]
    assert "request_latency" in found[1].message and "nearest are 300ms" in found[1].message


def test_vllm_source_classes_cannot_share_a_model() -> None:
    text = VLLM_BASE.replace("300ms", "250ms") + (
        "  - name: code\n    models: [a, b]\n    slos: {ttft: {objective: {percentile: 99, threshold: 100ms}}}\n"
    )
    issue = only_issue(text)
    assert issue.field == "classes[1].models"
    assert "cannot share a model" in issue.message


def test_slokit_source_buckets_include_thresholds() -> None:
    spec = load_spec_text(MINIMAL.replace("500ms", "333ms"), "s.yaml")
    assert 0.333 in spec.buckets(Sli.TTFT)
    assert list(spec.buckets(Sli.TTFT)) == sorted(spec.buckets(Sli.TTFT))


def test_classify_header_then_rules_then_other() -> None:
    spec = load_spec(Path(__file__).parent.parent / "examples" / "assistant.yaml")
    assert spec.classify("code", None, None) == "code"
    assert spec.classify("chat", None, 99999) == "chat"
    assert spec.classify(None, 0, 5000) == "chat"  # priority 0 -> chat
    assert spec.classify(None, 3, 100) == "code"  # short untagged prompt -> code
    assert spec.classify("made-up", 3, 5000) == "other"
    assert spec.classify(None, None, None) == "other"


def test_file_errors(tmp_path: Path) -> None:
    for path, words in [
        (tmp_path / "missing.yaml", "no such file"),
        (tmp_path, "is a directory"),
    ]:
        with pytest.raises(SpecError) as caught:
            load_spec(path)
        assert words in str(caught.value)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(SpecError, match="not UTF-8"):
        load_spec(binary)


SLOKIT_BASE = VLLM_BASE.replace("source: vllm", "source: slokit").replace(
    "      ttft:\n        objective: {percentile: 95, threshold: 300ms}\n",
    "      ttft:\n        objective: {percentile: 95, threshold: 300ms}\n"
    "      itl:\n        objective: {percentile: 95, threshold: 50ms}\n"
    "      e2e:\n        objective: {percentile: 95, threshold: 5s}\n",
)


def test_measured_at_defaults_to_frontend_for_ttft_and_e2e_with_source_slokit() -> None:
    from slokit.schema import MeasuredAt

    slos = load_spec_text(SLOKIT_BASE, "s.yaml").request_class("chat").slos
    assert {sli: slo.measured_at for sli, slo in slos.items()} == {
        Sli.TTFT: MeasuredAt.FRONTEND,
        Sli.ITL: MeasuredAt.ENGINE,
        Sli.E2E: MeasuredAt.FRONTEND,
    }
    engine = SLOKIT_BASE.replace("      e2e:\n", "      e2e:\n        measured_at: engine\n")
    spec = load_spec_text(engine, "s.yaml")
    assert spec.request_class("chat").slos[Sli.E2E].measured_at is MeasuredAt.ENGINE
    assert spec.latency_metric(Sli.E2E, spec.request_class("chat")) == "slokit_e2e_request_latency_seconds"
    assert spec.latency_metric(Sli.TTFT, spec.request_class("chat")) == "slokit_frontend_time_to_first_token_seconds"
    vllm = load_spec_text(VLLM_BASE.replace("300ms", "250ms"), "s.yaml").request_class("chat").slos
    assert vllm[Sli.TTFT].measured_at is MeasuredAt.ENGINE


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        (SLOKIT_BASE.replace("      itl:\n", "      itl:\n        measured_at: frontend\n"),
         "classes[0].slos.itl.measured_at", "only e2e and ttft"),
        (SLOKIT_BASE.replace("      ttft:\n", "      ttft:\n        measured_at: client\n"),
         "classes[0].slos.ttft.measured_at", "use frontend or engine"),
        (VLLM_BASE.replace("300ms", "250ms").replace("      ttft:\n", "      ttft:\n        measured_at: frontend\n"),
         "classes[0].slos.ttft.measured_at", "source: vllm has no frontend"),
    ],
)  # fmt: skip
def test_measured_at_refuses_what_cannot_be_measured_there(text: str, field: str, words: str) -> None:
    issue = only_issue(text)
    assert issue.field == field and words in issue.message


ALERTING_TIERS = MINIMAL.replace(
    "objective: {percentile: 95, threshold: 500ms}",
    "objective: {percentile: 95, threshold: 500ms}\n        tiers:\n          acceptable: {p95: 1s}\n"
    "          critical: {p50: 2s, p95: 3s}",
)


def test_alerting_tiers_replace_the_default_cells() -> None:
    spec = load_spec_text(ALERTING_TIERS + "alerting:\n  tiers: {page: [critical.p95]}\n", "spec.yaml")
    assert [str(c) for c in spec.alerting.page_tiers] == ["critical.p95"]  # critical.p50 no longer pages
    assert [str(c) for c in spec.alerting.ticket_tiers] == ["acceptable.p95"]  # the ticket default stays
    tiers = "alerting:\n  tiers: {page: [critical.p95, critical.p50], ticket: [critical.p50]}\n"
    both = load_spec_text(ALERTING_TIERS + tiers, "spec.yaml")
    assert [str(c) for c in both.alerting.page_tiers] == ["critical.p95", "critical.p50"]
    assert [str(c) for c in both.alerting.ticket_tiers] == ["critical.p50"]
    assert only_issue(ALERTING_TIERS + "alerting:\n  tiers: {page: []}\n").field == "alerting.tiers.page"


@pytest.mark.parametrize(
    ("tiers", "field", "message"),
    [
        ("{page: [critical.p42]}", "alerting.tiers.page[0]", "is not a tier cell; write <tier>.<percentile>"),
        ("{page: [severe.p50]}", "alerting.tiers.page[0]", "tier one of target, acceptable, critical"),
        ("{ticket: [acceptable.p95, acceptable.p95]}", "alerting.tiers.ticket[1]", "acceptable.p95 is listed twice"),
        ("{pages: [critical.p50]}", "alerting.tiers.pages", "unknown"),
    ],
)
def test_alerting_tiers_errors(tiers: str, field: str, message: str) -> None:
    issue = only_issue(ALERTING_TIERS + f"alerting:\n  tiers: {tiers}\n")
    assert issue.field == field and message in issue.message, str(issue)
    assert issue.location.line == 14


def test_min_requests_default_and_range() -> None:
    assert load_spec_text(MINIMAL, "spec.yaml").alerting.min_requests == 30
    spec = load_spec_text(MINIMAL + "alerting:\n  min_requests: 120\n", "spec.yaml")
    assert spec.alerting.min_requests == 120
    issue = only_issue(MINIMAL + "alerting:\n  min_requests: 0\n")
    assert issue.field == "alerting.min_requests" and issue.location.line == 11, str(issue)


def test_pages_and_tickets_need_different_receivers() -> None:
    issue = only_issue(MINIMAL + "alerting:\n  receivers: {page: oncall, ticket: oncall}\n")
    assert issue.field == "alerting.receivers.ticket" and "different receivers" in issue.message, str(issue)
    assert "'oncall'" in issue.message and issue.location.line == 11


def test_replica_labels_the_selector_pins_cannot_tell_replicas_apart() -> None:
    pinned = MINIMAL + "selector: {namespace: prod}\nalerting:\n  replica_labels: [namespace]\n"
    issue = only_issue(pinned)
    assert issue.field == "alerting.replica_labels" and "cannot be told apart" in issue.message
    assert "namespace: prod" in issue.message
    # one free label is enough: the namespace the selector pins, the pod that differs per replica
    spec = load_spec_text(pinned.replace("[namespace]", "[namespace, pod]"), "spec.yaml")
    assert spec.alerting.replica_labels == ("namespace", "pod")
