"""Engine presets (SGLang, TGI) and histograms a spec names itself: validation, and alerts firing on hand-written
series.

The promtool inputs here are written by hand in each engine's own names and label spellings (SGLang's
prometheus_client writes `le="1.0"`; a millisecond gateway histogram `le="500"`), not derived from the generator,
so a wrong metric name, label, selector or unit in the rules makes them fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from slokit.generate import generate_all
from slokit.generate.writer import write_files
from slokit.local.prometheus import check_rule_files, run_rule_tests
from slokit.spec import SpecError, load_spec, load_spec_text

DATA = Path(__file__).resolve().parent / "data" / "engines"
SGLANG = DATA / "sglang.yaml"
CUSTOM = DATA / "custom-histogram.yaml"
TGI_SOURCE = DATA / "tgi-source.yaml"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


# The fast page's long window: alerts.py shortens it (FAST_LONG_WINDOWS) so a total outage pages within 11m, which
# for these specs' objectives is 10m rather than the 1h of the default burn-rate table.
FAST_PAGE_LONG = "10m"


def _rules(spec_path: Path, out: Path) -> tuple[Path, Path]:
    spec = load_spec(spec_path)
    files = {k: v for k, v in generate_all([spec]).items() if k.startswith("rules/")}
    write_files(files, out, check=False)
    return out / "rules" / f"{spec.service}.rules.yaml", out / "rules" / f"{spec.service}.rules.test.yaml"


def _firing(alert: str, **labels: str) -> str:
    matchers = ",".join([f'alertname="{alert}"', 'alertstate="firing"', *(f'{k}="{v}"' for k, v in labels.items())])
    return f"count(ALERTS{{{matchers}}}) or vector(0)"


def _run(rules: Path, tmp: Path, series: list[dict[str, str]], checks: list[tuple[str, float]], at: str) -> Any:
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {"expr": expr, "eval_time": at, "exp_samples": [{"labels": "{}", "value": value}]}
                    for expr, value in checks
                ],
            }
        ],
    }
    path = tmp / "handwritten.test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    return run_rule_tests([path])


def _sglang_ttft(per_minute_by_le: dict[str, float]) -> list[dict[str, str]]:
    """Cumulative SGLang TTFT buckets (client_python spelling) growing by the given per-minute counts."""
    out = []
    for le, rate in per_minute_by_le.items():
        series = (
            f'sglang:time_to_first_token_seconds_bucket{{model_name="{MODEL}",instance="10.0.0.7:30000",le="{le}"}}'
        )
        out.append({"series": series, "values": f"0+{rate}x40"})
    total = per_minute_by_le["+Inf"]
    count = f'sglang:time_to_first_token_seconds_count{{model_name="{MODEL}",instance="10.0.0.7:30000"}}'
    out.append({"series": count, "values": f"0+{total}x40"})
    return out


@pytest.mark.prometheus
@pytest.mark.parametrize("spec_path", [SGLANG, CUSTOM, TGI_SOURCE], ids=["sglang", "custom-histogram", "tgi"])
def test_generated_rules_and_their_promtool_tests_pass(spec_path: Path, tmp_path: Path, promtool_path: str) -> None:
    rules, tests = _rules(spec_path, tmp_path)
    checked = check_rule_files([rules])
    assert checked.ok, checked.output
    tested = run_rule_tests([tests])
    assert tested.ok, tested.output[-4000:]


@pytest.mark.prometheus
def test_sglang_ttft_page_fires_on_slow_requests_and_not_at_the_threshold(tmp_path: Path, promtool_path: str) -> None:
    rules, _ = _rules(SGLANG, tmp_path)
    page = _firing("SlokitErrorBudgetBurn", slo="ttft", long=FAST_PAGE_LONG, model=MODEL, severity="critical")
    # Every request lands between 0.8 s (the threshold) and 1 s: all slow.
    slow = _sglang_ttft({"0.6": 0, "0.8": 0, "1.0": 100, "2.0": 100, "+Inf": 100})
    result = _run(rules, tmp_path, slow, [(page, 1)], "20m")
    assert result.ok, result.output[-3000:]
    # Every request exactly in the 0.8 s bucket: at the threshold is good, so nothing pages.
    at_threshold = _sglang_ttft({"0.6": 0, "0.8": 100, "1.0": 100, "2.0": 100, "+Inf": 100})
    result = _run(rules, tmp_path, at_threshold, [(page, 0)], "20m")
    assert result.ok, result.output[-3000:]


def _gateway(code: str, per_minute_by_le: dict[str, float]) -> list[dict[str, str]]:
    base = 'upstream_model="llama-3-8b",route="/v1/chat/completions",code="' + code + '",instance="gw-0:9000"'
    out = [
        {"series": f'gateway_first_token_latency_ms_bucket{{{base},le="{le}"}}', "values": f"0+{rate}x40"}
        for le, rate in per_minute_by_le.items()
    ]
    out.append(
        {"series": f"gateway_first_token_latency_ms_count{{{base}}}", "values": f"0+{per_minute_by_le['+Inf']}x40"}
    )
    return out


@pytest.mark.prometheus
def test_millisecond_histogram_with_selector_pages_only_on_selected_slow_requests(
    tmp_path: Path, promtool_path: str
) -> None:
    rules, _ = _rules(CUSTOM, tmp_path)
    page = _firing("SlokitErrorBudgetBurn", slo="ttft", long=FAST_PAGE_LONG, model="llama-3-8b", severity="critical")
    fast = {"250": 60, "500": 60, "1000": 60, "+Inf": 60}  # all at or under 500 ms
    slow = {"250": 0, "500": 0, "1000": 60, "+Inf": 60}  # all between 500 ms and 1 s
    # Slow 5xx responses are outside the selector (code!~"5.."): no page while the 2xx ones are fast.
    result = _run(rules, tmp_path, [*_gateway("200", fast), *_gateway("503", slow)], [(page, 0)], "20m")
    assert result.ok, result.output[-3000:]
    result = _run(rules, tmp_path, [*_gateway("200", slow), *_gateway("503", fast)], [(page, 1)], "20m")
    assert result.ok, result.output[-3000:]
    # The p50 is read back in seconds (0.5 s .. 1 s), not milliseconds.
    p50 = 'slokit:latency_seconds:quantile5m{slo="ttft",quantile="0.5"} > 0.5 < 1'
    result = _run(rules, tmp_path, _gateway("200", slow), [(f"count({p50})", 1)], "20m")
    assert result.ok, result.output[-3000:]


BASE = """
version: slokit/v1
service: s
source: {source}
models: [{{name: m1}}, {{name: m2}}]
classes:
  - name: chat
    models: [m1]
    slos:
{slos}
"""


def _errors(source: str, slos: str) -> str:
    with pytest.raises(SpecError) as info:
        load_spec_text(BASE.format(source=source, slos=slos), "spec.yaml")
    return str(info.value)


def test_sglang_threshold_off_its_buckets_is_refused_with_the_flag_to_fix_it() -> None:
    text = _errors("sglang", "      ttft: {objective: {percentile: 95, threshold: 500ms}}")
    assert "spec.yaml:" in text and "classes[0].slos.ttft.objective.threshold" in text
    assert "nearest are 400ms and 600ms" in text and "--bucket-time-to-first-token" in text


def test_sglang_has_no_tpot_histogram() -> None:
    text = _errors("sglang", "      tpot: {objective: {percentile: 95, threshold: 40ms}}")
    assert "exposes no time per output token histogram" in text


def test_sglang_threshold_on_a_boundary_loads() -> None:
    spec = load_spec_text(
        BASE.format(source="sglang", slos="      itl: {objective: {percentile: 99, threshold: 35ms}}")
    )
    assert (
        spec.histogram(spec.classes[0], next(iter(spec.classes[0].slos))).name == "sglang:inter_token_latency_seconds"
    )


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        ("{histogram: lat_bucket}", "give the base name"),
        ("{histogram: lat, unit: us}", "is not a histogram unit"),
        ("{histogram: lat, selector: {code: '=~5(..'}}", "is not a valid regular expression"),
        ("{histogram: lat, selector: [a]}", "must be a mapping of label to value"),
        ("{histogram: lat, model_label: le}", "reserved label"),
        ("{histogram: lat, unit: ms, buckets: [100, 250]}", "not a bucket boundary of the declared buckets of lat"),
        ("{selector: {a: b}}", "missing required key 'histogram'"),
    ],
)
def test_custom_histogram_mistakes_are_named(metric: str, expected: str) -> None:
    slos = f"      e2e: {{metric: {metric}, objective: {{percentile: 95, threshold: 300ms}}}}"
    assert expected in _errors("slokit", slos)


def test_custom_histogram_without_model_label_needs_one_model() -> None:
    spec = BASE.format(
        source="slokit", slos="      e2e: {metric: {histogram: lat}, objective: {percentile: 95, threshold: 1s}}"
    )
    text = spec.replace("models: [m1]", "models: [m1, m2]")
    with pytest.raises(SpecError, match="can serve only one model"):
        load_spec_text(text)


TGI = DATA / "tgi.yaml"


@pytest.mark.prometheus
def test_tgi_histograms_without_model_label_page_on_slow_requests(tmp_path: Path, promtool_path: str) -> None:
    """TGI writes no model label and its own float spellings of 0.0001 x 1.5^k (router/src/server.rs)."""
    rules, tests = _rules(TGI, tmp_path)
    assert run_rule_tests([tests]).ok
    page = _firing("SlokitErrorBudgetBurn", slo="e2e", long=FAST_PAGE_LONG, model="mistral-7b", class_="batch")
    page = page.replace("class_=", "class=")

    def series(good: float) -> list[dict[str, str]]:
        out = []
        for le, count in (("0.7481827642679213", 0), ("1.122274146401882", good), ("1.683411219602823", 30),
                          ("+Inf", 30)):  # fmt: skip
            out.append({"series": f'tgi_request_duration_bucket{{instance="tgi-0:80",le="{le}"}}',
                        "values": f"0+{count}x40"})  # fmt: skip
        out.append({"series": 'tgi_request_duration_count{instance="tgi-0:80"}', "values": "0+30x40"})
        return out

    result = _run(rules, tmp_path, series(0), [(page, 1)], "20m")
    assert result.ok, result.output[-3000:]
    result = _run(rules, tmp_path, series(30), [(page, 0)], "20m")
    assert result.ok, result.output[-3000:]


def test_tgi_threshold_off_its_buckets_names_the_nearest_and_source_tgi_explains() -> None:
    slos = "      e2e: {metric: {histogram: tgi_request_duration}, objective: {percentile: 95, threshold: 1s}}"
    assert "nearest are 748.183ms and 1.12227s" in _errors("slokit", slos)
    off = _errors("tgi", "      e2e: {objective: {percentile: 95, threshold: 1s}}")
    assert "TGI's tgi_request_duration buckets" in off and "nearest are 748.183ms and 1.12227s" in off


@pytest.mark.parametrize("sli", ["ttft", "itl"])
def test_tgi_source_refuses_the_slis_tgi_does_not_export_and_names_the_way_out(sli: str) -> None:
    text = _errors("tgi", f"      {sli}: {{objective: {{percentile: 95, threshold: 1.12227s}}}}")
    assert f"classes[0].slos.{sli}" in text and "TGI exports no" in text
    assert "tgi_request_duration for e2e" in text and "a gateway in front of TGI" in text and "metric:" in text


def test_tgi_source_covers_one_model_and_has_no_kv_cache_alert_setting() -> None:
    two = _errors("tgi", "      e2e: {objective: {percentile: 95, threshold: 1.12227s}}")
    assert "models: source: tgi covers one model" in two and "2 are listed" in two
    text = TGI_SOURCE.read_text() + "alerting: {kv_cache_usage_max: 0.9}\n"
    with pytest.raises(SpecError, match=r"alerting.kv_cache_usage_max: TGI exports no KV-cache usage gauge"):
        load_spec_text(text, "tgi.yaml")


def _tgi(per_minute_by_le: dict[str, float], metric: str = "tgi_request_duration") -> list[dict[str, str]]:
    """Cumulative TGI histogram series as its router writes them: no model label, Rust's float spellings."""
    out = [
        {"series": f'{metric}_bucket{{instance="tgi-0:80",le="{le}"}}', "values": f"0+{rate}x40"}
        for le, rate in per_minute_by_le.items()
    ]
    out.append({"series": f'{metric}_count{{instance="tgi-0:80"}}', "values": f"0+{per_minute_by_le['+Inf']}x40"})
    return out


@pytest.mark.prometheus
def test_tgi_source_alerts_fire_on_tgi_series_and_skip_kv_cache(tmp_path: Path, promtool_path: str) -> None:
    """source: tgi pages on slow tgi_request_duration and tgi_request_mean_time_per_token_duration series without
    a model label, raises the queue alert from tgi_queue_size and tgi_batch_current_size, and has no KV-cache or
    preemption alert (TGI exports neither)."""
    rules, _ = _rules(TGI_SOURCE, tmp_path)
    text = rules.read_text()
    assert "SlokitKVCacheNearFull" not in text and "SlokitEnginePreempting" not in text
    assert "kv_cache" not in text and "model_name" not in text
    labels = {"model": "mistral-7b", "class": "batch"}
    e2e_page = _firing("SlokitErrorBudgetBurn", slo="e2e", long=FAST_PAGE_LONG, severity="critical", **labels)
    tpot_page = _firing("SlokitErrorBudgetBurn", slo="tpot", long="1h", severity="critical", **labels)
    fast = {"0.7481827642679213": 0, "1.122274146401882": 30, "1.683411219602823": 30, "+Inf": 30}
    slow = {"0.7481827642679213": 0, "1.122274146401882": 0, "1.683411219602823": 30, "+Inf": 30}
    result = _run(rules, tmp_path, _tgi(slow), [(e2e_page, 1)], "20m")
    assert result.ok, result.output[-3000:]
    result = _run(rules, tmp_path, _tgi(fast), [(e2e_page, 0)], "20m")
    assert result.ok, result.output[-3000:]
    # TPOT: every request between 43.79 ms (the threshold) and 65.68 ms.
    tpot = {"0.043789389038085935": 0, "0.0656840835571289": 30, "+Inf": 30}
    result = _run(rules, tmp_path, _tgi(tpot, "tgi_request_mean_time_per_token_duration"), [(tpot_page, 1)], "40m")
    assert result.ok, result.output[-3000:]
    # The engine full (64 running, the spec's max_num_seqs) with requests queued: the queue alert, per instance.
    queue = _firing("SlokitEngineQueueFull", model="mistral-7b", instance="tgi-0:80")
    gauges = [
        {"series": 'tgi_queue_size{instance="tgi-0:80"}', "values": "5x40"},
        {"series": 'tgi_batch_current_size{instance="tgi-0:80"}', "values": "64x40"},
    ]
    result = _run(rules, tmp_path, gauges, [(queue, 1)], "30m")
    assert result.ok, result.output[-3000:]
    gauges[1]["values"] = "32x40"
    result = _run(rules, tmp_path, gauges, [(queue, 0)], "30m")
    assert result.ok, result.output[-3000:]
