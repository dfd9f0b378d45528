"""A fleet, not a service: what slokit writes grows with the spec's shapes, not with the number of models.

Two specs of the same shape with 4 and 32 models (source slokit with every model serving every class, source vllm
with the classes spread over the models) are generated side by side: the larger one may have at most 1.25x the alert
rules and 2x the rules bytes, runbook lines and generated-test bytes. On the 32-model fleet, a real promtool runs
the generated rules over every model's raw series: healthy, nothing fires; one model's requests all slow, its
pages fire and no other model's do.
"""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from slokit.fleet import fleet_spec_yaml, model_names
from slokit.generate import alerts, generate_all, promtool_tests
from slokit.generate.rules import rule_groups
from slokit.schema import RECORD_LATENCY_BUCKET_RATE as RECORD_RATES
from slokit.schema import record_sli_total
from slokit.spec import RequestClass, Spec, load_spec, load_spec_text


def _spec(models: int, source: str) -> Spec:
    return load_spec_text(fleet_spec_yaml(models, source), f"fleet-{source}-{models}.yaml")


def _sizes(spec: Spec) -> dict[str, float]:
    files = generate_all([spec])
    rules = files[f"rules/{spec.service}.rules.yaml"]
    data = yaml.safe_load(rules)
    return {
        "alert rules": sum(1 for g in data["groups"] for r in g["rules"] if "alert" in r),
        "rules bytes": len(rules.encode()),
        "runbook lines": len(files[f"runbooks/{spec.service}.md"].splitlines()),
        "test bytes": sum(len(text.encode()) for path, text in files.items() if path.endswith(".test.yaml")),
    }


@pytest.mark.parametrize("source", ["slokit", "vllm"])
def test_32_models_write_about_what_4_models_write(source: str) -> None:
    small = _sizes(_spec(4, source))
    large = _sizes(_spec(32, source))
    limits = {"alert rules": 1.25, "rules bytes": 2.0, "runbook lines": 2.0, "test bytes": 2.0}
    ratios = {k: large[k] / small[k] for k in limits}
    assert all(ratios[k] <= limits[k] for k in limits), (source, ratios, small, large)


def test_every_rule_covers_every_model_of_its_classes() -> None:
    """Rules are written once: each burn-rate rule's members are every model of every class it covers."""
    spec = _spec(32, "slokit")
    burn = [r for r in alerts.alert_rules(spec) if r.name == alerts.NAME_BURN]
    assert burn
    for rule in burn:
        assert "model" not in rule.labels and rule.model is None
        models = {m.model for m in rule.members}
        assert models == set(model_names(32)), rule.title


RECORD_TOTAL = record_sli_total("5m")


def test_bucket_rates_and_tiles_read_each_histogram_once_where_classes_share_their_models() -> None:
    """Every model serves every class (source slokit): one raw selector per histogram, the class label matching
    the classes that read it. Classes spread over the models (source vllm, no class label): one per class."""
    for source, per_class in (("slokit", False), ("vllm", True)):
        spec = _spec(32, source)
        rates = [r for g in rule_groups(spec) for r in g.rules if getattr(r, "record", None) == RECORD_RATES]
        for rule in rates:
            sli = rule.labels["slo"]
            readers = [rc for rc in spec.classes if any(s.value == sli for s in rc.slos)]
            raws = re.findall(r"rate\(([\w:]+\{[^}]*\})\[5m\]\)", rule.expr)
            assert len(raws) == (len(readers) if per_class else 1), (source, sli, raws)
            if not per_class:
                names = "|".join(rc.name for rc in readers)
                assert (f'class="{names}"' if len(readers) == 1 else f'class=~"{names}"') in raws[0], raws
        # the 5m tiles: each histogram's +Inf bucket is looked up (new-series check, one per term) once per SLI
        # where the classes share their models, once per class where they do not
        total = next(r for g in rule_groups(spec) for r in g.rules if getattr(r, "record", None) == RECORD_TOTAL)
        for sli in {s for rc in spec.classes for s in rc.slos}:
            readers = [rc for rc in spec.classes if rc.slos.get(sli) and rc.slos[sli].objective]
            metric = spec.histogram(readers[0], sli).name + "_bucket"
            lookups = re.findall(re.escape(metric) + r'\{[^}]*le="\+Inf"\}\[1h:5m\]', total.expr)
            assert len(lookups) == (len(readers) if per_class else 1), (source, sli, lookups)


def _healthy_and_outage_tests(spec: Spec, broken: str, minutes: int) -> dict[str, Any]:
    """One promtool group with every model's raw series: all healthy, except `broken`, whose requests are all
    slower than every threshold; and one with every model healthy.

    The series hold only the buckets the alerts decide on (every alerting threshold, the scale-out boundary) and
    +Inf: promtool's test engine refuses a query that loads more than 10,000 samples, which every bucket of 32
    models would (Prometheus itself allows 50 million). Healthy requests sit in the lowest of them, at or under
    every threshold."""
    healthy_inputs: list[dict[str, str]] = []
    outage_inputs: list[dict[str, str]] = []
    for rc in spec.classes:
        for sli in rc.slos:
            bounds = sorted(set(promtool_tests._alerting_thresholds(spec, rc, sli)))
            good = promtool_tests.Scenario({0: 1.0})
            for model in rc.models:
                series, _ = promtool_tests._histogram_inputs(spec, model, rc, sli, good, minutes, bounds=bounds)
                healthy_inputs += series
                slow = promtool_tests.Scenario({}) if model == broken else good
                series, _ = promtool_tests._histogram_inputs(spec, model, rc, sli, slow, minutes, bounds=bounds)
                outage_inputs += series
    for rc in spec.classes:
        for model in rc.models:
            request = promtool_tests._requests_input(spec, model, rc, promtool_tests.RPM, minutes)
            healthy_inputs.append(request)
            outage_inputs.append(request)
    end = f"{minutes - 2}m"
    severity = spec.alerting.severity.page
    pages = f'group by (model) (ALERTS{{alertstate="firing",severity="{severity}"}})'
    anything = 'group by (alertname) (ALERTS{alertstate="firing"})'
    return {
        "rule_files": [f"{spec.service}.rules.yaml"],
        "evaluation_interval": "1m",
        "group_eval_order": [g["name"] for g in _groups(spec)],
        "tests": [
            {
                "name": "a healthy fleet is quiet",
                "interval": "1m",
                "input_series": healthy_inputs,
                "promql_expr_test": [{"expr": anything, "eval_time": end, "exp_samples": []}],
            },
            {
                "name": f"an outage of {broken} pages for {broken} alone",
                "interval": "1m",
                "input_series": outage_inputs,
                "promql_expr_test": [
                    {"expr": pages, "eval_time": end, "exp_samples": [{"labels": f'{{model="{broken}"}}', "value": 1}]}
                ],
            },
        ],
    }


def _groups(spec: Spec) -> list[dict[str, Any]]:
    return [g.to_data() for g in rule_groups(spec)]


@pytest.mark.prometheus
@pytest.mark.parametrize("source", ["slokit", "vllm"])
def test_one_model_outage_pages_for_that_model_alone_on_a_32_model_fleet(
    source: str, tmp_path: Path, promtool_path: str
) -> None:
    spec = _spec(32, source)
    pages = [
        r
        for r in alerts.alert_instances(spec, [spec.models[5].name])
        if r.labels.get("severity") == spec.alerting.severity.page and r.kind.value == "burn_rate"
    ]
    fastest = max(promtool_tests.fires_at(r) for r in pages)
    minutes = math.ceil(fastest / 60) + 6
    (tmp_path / f"{spec.service}.rules.yaml").write_text(yaml.safe_dump({"groups": _groups(spec)}, sort_keys=False))
    tests = _healthy_and_outage_tests(spec, spec.models[5].name, minutes)
    (tmp_path / "fleet.test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False, width=10**6))
    done = subprocess.run(
        [promtool_path, "test", "rules", "fleet.test.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_generation_says_what_it_does_once_it_takes_more_than_a_few_seconds() -> None:
    from slokit.generate import QUIET_FOR_S, Progress

    said: list[str] = []
    now = [0.0]
    progress = Progress(said.append, clock=lambda: now[0])
    progress.step("fleet", "rules and alerts")
    assert said == []  # a small spec prints nothing
    now[0] = QUIET_FOR_S + 0.5
    progress.step("fleet", "promtool tests")
    assert said == [f"generating fleet: promtool tests done ({QUIET_FOR_S + 0.5:.1f}s)"]


def test_generate_all_reports_each_part_of_each_spec_once_past_the_quiet_time() -> None:
    lines: list[str] = []
    import slokit.generate as generate

    original = generate.QUIET_FOR_S
    generate.QUIET_FOR_S = 0.0
    try:
        generate_all([_spec(4, "vllm")], progress=lines.append)
    finally:
        generate.QUIET_FOR_S = original
    parts = [line.split(": ", 1)[1].split(" done")[0] for line in lines]
    assert parts == ["rules and alerts", "promtool tests", "counters tests", "dashboards", "runbook",
                     "Kubernetes objects", "Alertmanager routing", "predictive autoscaling"]  # fmt: skip


def test_slokit_generate_prints_progress_on_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI passes generate_all's progress to stderr (the quiet time set to 0 here, so that a fast machine
    prints it too), and its stdout keeps only the list of files written."""
    from typer.testing import CliRunner

    import slokit.generate as generate
    from slokit.cli import app

    monkeypatch.setattr(generate, "QUIET_FOR_S", 0.0)
    spec = tmp_path / "fleet.yaml"
    spec.write_text(fleet_spec_yaml(4, "vllm"))
    result = CliRunner().invoke(app, ["generate", str(spec), "-o", str(tmp_path / "out"), "--no-promtool"])
    assert result.exit_code == 0, result.output
    assert "generating fleet: promtool tests done" in result.stderr
    assert "generating" not in result.stdout


@pytest.mark.prometheus
def test_the_long_windows_run_beside_the_baseline_on_a_class_it_leaves_free(tmp_path: Path, promtool_path: str) -> None:
    """The two longest scenarios are one where the baseline leaves a class free: the long windows take an SLO of
    it, and a real promtool passes every check of both, evaluated together over the baseline's day of history."""
    spec = load_spec_text(fleet_spec_yaml(2, "slokit", classes=5), "fleet-5-classes.yaml")
    files = generate_all([spec])
    tests = yaml.safe_load(files[f"rules/{spec.service}.rules.test.yaml"])
    merged = [g for g in tests["tests"] if "; beside it, long windows filled" in g["name"]]
    assert len(merged) == 1 and not [g for g in tests["tests"] if g["name"].startswith("long windows filled")]
    found = re.search(r"long windows filled: \d+h of (\S+) ", merged[0]["name"])
    assert found is not None
    rules = alerts.alert_instances(spec, promtool_tests.tested_models(spec))
    assert found.group(1) not in {rc.name for rc, _, _ in promtool_tests._baseline_slos(spec, rules)}
    # four classes leave none free: the two scenarios stay apart, as they were
    narrow = yaml.safe_load(generate_all([_spec(4, "slokit")])["rules/fleet.rules.test.yaml"])
    assert [g for g in narrow["tests"] if g["name"].startswith("long windows filled")]
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / f"{spec.service}.rules.yaml").write_text(files[f"rules/{spec.service}.rules.yaml"])
    only = {**tests, "tests": merged}
    (tmp_path / "rules" / "merged.test.yaml").write_text(yaml.safe_dump(only, sort_keys=False, width=10**6))
    done = subprocess.run([promtool_path, "test", "rules", "merged.test.yaml"], cwd=tmp_path / "rules",
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


_RUN = re.compile(r"(-?[\d.]+(?:e[+-]?\d+)?)([+-][\d.]+(?:e[+-]?\d+)?)x(\d+)")


def _present(values: str) -> list[bool]:
    """Per sample of a promtool input series (expanding notation, `_` for none): whether it has a value."""
    out: list[bool] = []
    for token in values.split():
        run = _RUN.fullmatch(token)
        out += [False] if token == "_" else [True] * (int(run.group(3)) + 1 if run else 1)
    return out


def _spellings(spec: Spec) -> tuple[dict[str, set[str]], dict[tuple[str, float], dict[str, list[bool]]]]:
    """Spellings of integer bounds in the generated tests per model, outside the consistency scenario; and in it,
    per (model, bound), each spelling's samples."""
    outside: dict[str, set[str]] = {}
    inside: dict[tuple[str, float], dict[str, list[bool]]] = {}
    for group in promtool_tests.unit_tests(spec)["tests"]:
        consistency = group["name"].startswith("consistency bucket by bucket")
        for series in group["input_series"]:
            found = re.search(r'model="([^"]+)".*le="(\d+(?:\.0)?)"', series["series"])
            if not found:
                continue
            model, le = found.groups()
            if consistency:
                inside.setdefault((model, float(le)), {})[le] = _present(series["values"])
            else:
                outside.setdefault(model, set()).add("go" if le.isdigit() else "python")
    return outside, inside


def _with_consistency(spec: Spec) -> RequestClass:
    return next(rc for rc in spec.classes if any(slo.consistency for slo in rc.slos.values()))


def test_each_spelling_of_an_integer_bound_is_written_in_the_generated_tests() -> None:
    """client_python writes `1.0`, Go `1`; the rules read both. In the generated tests the first tested model of a
    class writes the one and the second the other; in the consistency scenario (the one reader of every bound's
    boundary series) each tested model changes spelling from step to step, one spelling at each sample. A rule, or
    a bucket-boundary series, that knows one spelling only fails somewhere, on a spec with one tested model per
    class too."""
    fleet = load_spec_text(fleet_spec_yaml(4, "slokit"), "fleet.yaml")
    single = load_spec(Path(__file__).resolve().parents[1] / "examples" / "summarize.yaml")
    outside, _ = _spellings(fleet)
    first, second = promtool_tests.tested_of(fleet, _with_consistency(fleet))[:2]
    assert outside[first] == {"python"} and outside[second] == {"go"}, outside
    for spec in (fleet, single):
        _, inside = _spellings(spec)
        assert inside
        for (model, bound), series in inside.items():
            assert sorted(series) == sorted([f"{bound:.1f}", f"{bound:.0f}"]), (model, bound, list(series))
            python, go = series[f"{bound:.1f}"], series[f"{bound:.0f}"]
            assert len(python) == len(go) and any(python) and any(go), (model, bound)
            assert all(a != b for a, b in zip(python, go, strict=True)), (model, bound)  # one spelling per sample
