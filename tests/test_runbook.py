"""Runbook generator: a section per alert whose anchor resolves, the ordered workflow, safe rendering of spec text."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from slokit.catalog import GPUS, MODELS
from slokit.fleet import fleet_spec_yaml
from slokit.generate import alerts, runbook
from slokit.generate.model import AlertKind, AlertRule, heading_anchor
from slokit.local.prometheus import check_rule_files, run_rule_tests
from slokit.plan import roofline
from slokit.schema import Sli
from slokit.spec import Spec, load_spec, load_spec_text

ROOT = Path(__file__).resolve().parent.parent
SPECS = [*sorted((ROOT / "examples").glob("*.yaml")), ROOT / "tests" / "data" / "engine-spec.yaml"]
STEP_TITLES = ("Queue depth", "Decode throughput", "KV cache", "Interconnect and GPU")


@pytest.fixture(params=SPECS, ids=lambda p: p.stem, scope="module")
def spec(request: pytest.FixtureRequest) -> Spec:
    return load_spec(request.param)


def unescape(text: str) -> str:
    """What a Markdown renderer shows for escaped text: backslash escapes and entities resolved."""
    return html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text))


def heading_anchors(markdown: str) -> list[str]:
    """GitHub's anchors for every ATX heading outside code fences (duplicates get -1, -2, ...)."""
    anchors: list[str] = []
    seen: dict[str, int] = {}
    fence: str | None = None
    for line in markdown.splitlines():
        opening = re.match(r"^(`{3,})", line)
        if opening:
            if fence is None:
                fence = opening.group(1)
            elif line.strip() == fence:
                fence = None
            continue
        if fence is not None:
            continue
        match = re.match(r"^#{1,6} (.+?)\s*$", line)
        if match:
            base = heading_anchor(unescape(match.group(1)))
            count = seen.get(base, 0)
            seen[base] = count + 1
            anchors.append(base if count == 0 else f"{base}-{count}")
    return anchors


def promql_blocks(markdown: str) -> list[str]:
    return [m.group(2).strip() for m in re.finditer(r"^(`{3,})promql\n(.*?)\n\1$", markdown, re.S | re.M)]


def sections(markdown: str) -> dict[str, str]:
    """Heading text -> section body, for level-2 headings."""
    parts = re.split(r"^## (.+)$", markdown, flags=re.M)
    return {unescape(parts[i]).strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_alert_has_a_section_its_runbook_url_resolves_to(spec: Spec) -> None:
    rules = alerts.alert_rules(spec)
    assert rules
    files = runbook.files(spec)
    assert list(files) == [f"runbooks/{spec.service}.md"]
    text = files[f"runbooks/{spec.service}.md"]
    anchors = heading_anchors(text)
    assert len(anchors) == len(set(anchors)), "duplicate heading anchors"
    by_title = sections(text)
    for rule in rules:
        url = rule.annotations["runbook_url"]
        assert url.endswith("#" + rule.anchor)
        assert rule.anchor in anchors, f"{rule.name}: {url} has no heading"
        assert rule.title in by_title


def guide_of(by_title: dict[str, str], body: str) -> str:
    """The body of the debugging guide an alert section links to."""
    match = re.search(r"^\*\*Debug:\*\* \[(.+?)\]\(#([^)]+)\)", body, re.M)
    assert match, "an alert section without a link to its debugging guide"
    assert heading_anchor(unescape(match.group(1))) == match.group(2)
    return by_title[unescape(match.group(1))]


def test_every_alert_section_links_the_one_fleet_guide_whose_steps_run_in_order(spec: Spec) -> None:
    rules = alerts.alert_rules(spec)
    text = runbook.render(spec, rules)
    by_title = sections(text)
    m = spec.metrics
    guides = {t: b for t, b in by_title.items() if t.startswith("Debugging")}
    # One guide for the fleet, however many models and alerts link to it.
    assert list(guides) == ["Debugging"]
    for title, body in by_title.items():
        if title in guides:
            continue
        assert "**Step " not in body, f"{title}: steps belong in the guide"
    body = guides["Debugging"]
    positions = [body.index(f"**Step {i}: {title}.**") for i, title in enumerate(STEP_TITLES, start=1)]
    if m.frontend_latency:  # the API server comes before the engine queue
        positions.insert(0, body.index("**Step 0: API server saturation.**"))
    else:
        assert "**Step 0:" not in body
    assert positions == sorted(positions)
    step_bodies = re.split(r"\*\*Step \d: ", body)[1:]
    for step in step_bodies:
        assert promql_blocks(step), "a step without PromQL"
        assert "Healthy:" in step and "Fix:" in step
    if m.frontend_latency:
        frontend = "\n".join(promql_blocks(step_bodies.pop(0)))
        assert m.frontend_latency[Sli.TTFT] in frontend and m.latency[Sli.TTFT] in frontend
    # The queries name the spec's only model, or the placeholder the reader replaces with the alert's model.
    model = spec.models[0].name if len(spec.models) == 1 else runbook.MODEL_PLACEHOLDER
    if m.model_label is not None:
        assert f'{m.model_label}="{model}"' in promql_blocks(step_bodies[0])[0]
        assert (runbook.MODEL_PLACEHOLDER in text) == (len(spec.models) > 1)
    for rule in rules:
        section = by_title[rule.title]
        assert section.index("What fired and what it means for users") < section.index("**Debug:**")
        assert "{{" not in section, f"{rule.title}: a template left for a human to expand"
        assert guide_of(by_title, section) == body


def test_every_runbook_url_anchor_is_a_heading_of_the_runbook(spec: Spec) -> None:
    """The anchors alerts link to, read from the written rule annotations, each resolve to one heading."""
    text = runbook.files(spec)[f"runbooks/{spec.service}.md"]
    anchors = heading_anchors(text)
    urls = [rule.annotations["runbook_url"] for rule in alerts.alert_rules(spec)]
    assert urls
    for url in urls:
        anchor = url.rsplit("#", 1)[1]
        assert anchors.count(anchor) == 1, f"{url}: no heading (or several) in the runbook"


def table_rows(body: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table in `body` whose first header is `first_header`, as header -> cell."""
    lines = body.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    headers = [unescape(c.strip()) for c in lines[start].strip("|").split(" | ")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [unescape(c.strip()) for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        rows.append(dict(zip(headers, cells, strict=True)))
    return rows


def test_a_burn_rules_table_gives_each_objectives_factor_from_its_parameters(spec: Spec) -> None:
    """Every member of every burn-rate rule has a row whose factor, error share and objective are the member's
    parameters (the values the rule's parameter series hold), and whose models include the member's model."""
    rules = [r for r in alerts.alert_rules(spec) if r.kind is AlertKind.BURN_RATE]
    assert rules
    by_title = sections(runbook.render(spec, rules))
    for rule in rules:
        rows = table_rows(by_title[rule.title], "Class")
        assert len(rows) == len({(m.request_class, m.sli) for m in rule.members})
        for member in rule.members:
            assert member.sli is not None
            (row,) = [r for r in rows if (r["Class"], r["SLO"]) == (member.request_class, member.sli.value)]
            params = member.params
            assert float(row["Burn factor"]) == pytest.approx(params["factor"], rel=1e-5)
            assert float(row["Error share that fires"].rstrip("%")) / 100 == pytest.approx(
                params["error_ratio"], rel=1e-3
            )
            assert row["Objective"].startswith(f"{params['objective'] * 100:g}% within ")
            assert member.model in row["Models"] or row["Models"] == f"all {len(spec.models)} models"
        # The factor the rule holds is the one its parameter series carry (alerts.burn_thresholds).
        series = {(labels["class"], labels["slo"], labels["long"], labels["short"]): factor
                  for labels, factor in alerts.burn_thresholds(spec)}  # fmt: skip
        for member in rule.members:
            assert member.sli is not None
            key = (member.request_class, member.sli.value, rule.labels["long"], rule.labels["short"])
            assert series[key] == member.params["factor"]


def test_a_consistency_and_a_queue_rules_tables_hold_their_members_values() -> None:
    spec = load_spec(ROOT / "examples" / "summarize.yaml")
    rules = alerts.alert_rules(spec)
    by_title = sections(runbook.render(spec, rules))
    (consistency,) = [r for r in rules if r.kind is AlertKind.CONSISTENCY]
    for member in consistency.members:
        assert member.sli is not None
        rows = table_rows(by_title[consistency.title], "Class")
        (row,) = [r for r in rows if (r["Class"], r["SLO"]) == (member.request_class, member.sli.value)]
        assert float(row["Limit (p99 / p50)"]) == member.params["limit"]
    for rule in (r for r in rules if r.kind is AlertKind.QUEUE_OVERLOAD):
        rows = table_rows(by_title[rule.title], "max-num-seqs")
        for member in rule.members:
            (row,) = [r for r in rows if member.model in r["Models"].split(", ")]
            assert float(row["max-num-seqs"]) == member.params["max_num_seqs"]


@pytest.mark.parametrize("source", ["slokit", "vllm"])
def test_a_32_model_fleets_runbook_is_within_a_quarter_of_a_4_model_fleets(source: str) -> None:
    """The runbook grows with the spec's classes and SLOs and by one table row per model, not by a copy of a
    section or a guide per model."""
    lines = {}
    for models in (4, 32):
        spec = load_spec_text(fleet_spec_yaml(models, source))
        text = runbook.render(spec, alerts.alert_rules(spec))
        assert text.count("## Debugging") == 1
        lines[models] = len(text.splitlines())
    assert lines[32] <= 1.25 * lines[4], lines


def test_healthy_numbers_come_from_the_spec_and_the_planner() -> None:
    spec = load_spec(ROOT / "examples" / "assistant.yaml")
    text = runbook.render(spec, alerts.alert_rules(spec))
    assert "KV-cache usage under 95% (`alerting.kv_cache_usage_max`)" in text
    assert "--max-num-seqs (llama-3-70b: 256)" in text
    (row,) = table_rows(text, "Model")  # the planner's batch, and its figure, in the models table
    assert row["Model"] == "llama-3-70b" and row["GPUs"] == "8 x h100-sxm" and row["max-num-seqs"] == "256"
    assert row["Largest batch within the ITL objective"] == "256"
    assert row["Expected decode tokens/s per engine at that batch"] == "16,591"
    assert row["Tightest ITL/TPOT objective"] == "30ms"  # code's TPOT objective
    assert "Queue time p99 is a small part of the tightest TTFT objective (300ms)" in text  # code's TTFT objective
    assert "## Tuning" in text
    for lever in ("Largest max batch size", "Prefix caching", "KV block size", "FP8 weights or KV cache",
                  "Speculative decoding"):  # fmt: skip
        assert f"### {lever}" in text


def test_tuning_levers_each_name_the_metric_that_shows_they_worked(spec: Spec) -> None:
    text = runbook.render(spec, [])
    tuning = text.split("## Tuning", 1)[1]
    for lever in re.split(r"^### ", tuning, flags=re.M)[1:]:
        assert "It worked when" in lever
        assert promql_blocks(lever)


def _rule(**overrides: Any) -> AlertRule:
    base: dict[str, Any] = {
        "name": "SlokitTest",
        "expr": 'slokit:burn_rate:ratio1h{service="summarize"} > 13.44',
        "for_": "2m",
        "labels": {"severity": "critical", "service": "summarize"},
        "annotations": {"summary": "Summary.", "description": "Description.", "runbook_url": "x#slokittest-x"},
        "kind": AlertKind.BURN_RATE,
        "anchor": "slokittest-x",
        "title": "SlokitTest: x",
        "model": "qwen2-72b",
        "request_class": "batch",
        "sli": Sli.E2E,
    }
    base.update(overrides)
    return AlertRule(**base)


INJECTIONS = (
    "<script>alert(1)</script>",
    "[click me](javascript:alert(1))",
    "![pixel](https://evil.example.com/p.png)",
    "</details><img src=x onerror=alert(1)>",
    "| fake | table |",
    "**bold** _under_ `code`",
)


def test_text_from_the_spec_and_alerts_cannot_inject_markdown_or_html() -> None:
    text = (ROOT / "examples" / "summarize.yaml").read_text()
    description = " ".join(INJECTIONS)
    spec = load_spec_text(re.sub(r"^description: .*$", "description: " + json.dumps(description), text, flags=re.M))
    multiline = load_spec_text(
        re.sub(r"^description: .*$", 'description: "ok\\n# Fake heading\\n- item"', text, flags=re.M)
    )
    rule = _rule(annotations={"summary": description, "description": "x\n## Injected section", "runbook_url": "x#a"})
    for rendered in (runbook.render(spec, [rule]), runbook.render(multiline, [rule])):
        assert "<script" not in rendered and "<img" not in rendered and "</details>" not in rendered
        assert "](javascript:" not in rendered.replace("\\](javascript:", "")
        assert "![pixel]" not in rendered
        assert not re.search(r"^#+ (Fake heading|Injected section)", rendered, re.M)
        assert not re.search(r"^- item", rendered, re.M)
        assert "**bold**" not in rendered
    assert spec.description == description and "# Fake heading" in multiline.description
    assert unescape(str(runbook.md_escape(description))) == description  # escaped, not dropped


def test_code_fences_outgrow_backticks_inside() -> None:
    assert str(runbook.code_block("a ``` b")) == "````promql\na ``` b\n````"
    assert str(runbook.code_span("x`y")) == "``x`y``"
    assert str(runbook.link("a](b", "https://x/(y) z")) == "[a\\](b](https://x/%28y%29%20z)"


def test_a_heading_that_does_not_give_the_rule_anchor_is_refused() -> None:
    spec = load_spec(ROOT / "examples" / "summarize.yaml")
    with pytest.raises(ValueError, match="not its runbook anchor"):
        runbook.render(spec, [_rule(title="Something else")])
    with pytest.raises(ValueError, match="share runbook anchor"):
        runbook.render(spec, [_rule(), _rule(name="SlokitOther")])


@pytest.mark.prometheus
def test_every_runbook_query_parses(spec: Spec, tmp_path: Path, promtool_path: str) -> None:
    blocks = promql_blocks(runbook.render(spec, alerts.alert_rules(spec)))
    assert blocks
    rules = [{"record": f"check:runbook:{i}", "expr": expr} for i, expr in enumerate(dict.fromkeys(blocks))]
    path = tmp_path / "runbook-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "runbook", "rules": rules}]}))
    result = check_rule_files([path])
    assert result.ok, result.output[-3000:]


def _hand_decode_tokens_per_second(spec: Spec, batch: int) -> float:
    """llama-3-70b on 8 x H100 SXM in bf16, worked out here from the preset figures: a decode step reads each GPU's
    share of the weights (all but the input embedding) and of the running sequences' KV at HBM bandwidth (memory
    bound at these batches, checked below), over the efficiency, plus two ring all-reduces of the batch's
    activations per layer; each step emits one token per running sequence."""
    model = MODELS["llama-3-70b"]
    gpu = GPUS["h100-sxm"]
    tp = 8
    inputs = roofline.inputs_for_model(spec, spec.model("llama-3-70b"))
    assert inputs is not None and inputs.tensor_parallel == tp and inputs.kv_dtype == inputs.weight_dtype == "bf16"
    context = inputs.context_tokens
    weights = (model.params - model.input_embedding_params) * 2 / tp
    kv = batch * context * 2 * model.layers * (model.kv_heads // tp) * model.head_dim * 2
    memory = (weights + kv) / gpu.hbm_bandwidth_bytes_per_second
    flops = (
        2 * model.active_params * batch + 4 * model.layers * model.attention_heads * model.head_dim * batch * context
    )
    assert flops / (gpu.bf16_dense_flops * tp) < memory  # memory bound
    link = gpu.nvlink_bytes_per_second / 2  # one direction
    allreduce = 8e-6 + 2 * (tp - 1) / tp * batch * model.hidden_size * 2 / link
    step = memory / 0.75 + 2 * model.layers * allreduce
    return batch / step


def test_expected_decode_is_the_planners_figure_at_the_running_batch() -> None:
    spec = load_spec(ROOT / "examples" / "assistant.yaml")
    inputs = roofline.inputs_for_model(spec, spec.model("llama-3-70b"))
    assert inputs is not None
    for batch in (4, 100):
        assert roofline.decode_tokens_per_second(inputs, batch) == pytest.approx(
            _hand_decode_tokens_per_second(spec, batch), rel=1e-9
        )
    assert roofline.decode_tokens_per_second(inputs, 0) == 0
    curve = roofline.expected_decode_curve(spec, spec.model("llama-3-70b"))
    assert curve is not None and [p.batch for p in curve] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    # A light load expects little: 4 running requests expect about a thirtieth of a full engine's tokens/s.
    assert curve[2].tokens_per_second < curve[-1].tokens_per_second / 25
    text = runbook.render(spec, alerts.alert_rules(spec))
    assert "| Model | 1 | 2 | 4 | 8 | 16 | 32 | 64 | 128 | 256 |" in text  # one row per model, a column per batch
    (row,) = table_rows(text, "Model | 1")
    assert row["1"] == f"{curve[0].tokens_per_second:,.0f} / 8.2ms"
    assert row["256"].startswith(f"{curve[-1].tokens_per_second:,.0f} / ")


@pytest.mark.prometheus
def test_runbook_expected_decode_query_evaluates_to_the_planner_at_the_running_batch(
    tmp_path: Path, promtool_path: str
) -> None:
    """The runbook's PromQL on Prometheus itself, with two engines running 4 and 100 requests: each engine's expected
    tokens/s is the hand calculation at its own batch, and measured / expected reads the engine's true share."""
    spec = load_spec(ROOT / "examples" / "assistant.yaml")
    text = runbook.render(spec, alerts.alert_rules(spec))
    by_title = sections(text)
    body = guide_of(by_title, by_title[alerts.alert_rules(spec)[0].title])
    step = body.split("**Step 2: Decode throughput.**", 1)[1].split("**Step 3:", 1)[0]

    def query(label: str) -> str:
        return step.split(f"\n{label}:\n\n```promql\n", 1)[1].split("\n```\n", 1)[0]

    expected = query("Expected decode tokens/s per engine of llama-3-70b at the batch it is running (roofline planner)")
    ratio = query("Measured over expected at the running batch, per engine of llama-3-70b (healthy: 0.7 or more)")
    labels = 'namespace="prod", job="vllm", model="llama-3-70b"'
    series = []
    checks = []
    for engine, batch, share in (("0", 4, 0.5), ("1", 100, 0.9)):
        tokens = _hand_decode_tokens_per_second(spec, batch)
        series.append({"series": f'slokit_requests_running{{{labels}, instance="a", engine="{engine}"}}',
                       "values": f"{batch}x20"})  # fmt: skip
        series.append({"series": f'slokit_generation_tokens_total{{{labels}, instance="a", engine="{engine}"}}',
                       "values": f"0+{tokens * share * 60:.6f}x20"})  # fmt: skip

        def at(value: float, engine: str = engine) -> str:
            return f'label_replace(vector({value!r}), "engine", "{engine}", "", "")'

        checks.append((f"count(abs(sum by (engine) ({expected}) / on (engine) {at(tokens)} - 1) < 0.001)", 1))
        checks.append((f"count(abs(sum by (engine) ({ratio}) - on (engine) {at(share)}) < 0.001)", 1))
    test = {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            {"expr": expr, "eval_time": "15m", "exp_samples": [{"labels": "{}", "value": value}]}
            for expr, value in checks
        ],
    }
    (tmp_path / "empty.yaml").write_text("groups: []\n")
    path = tmp_path / "decode.test.yaml"
    path.write_text(yaml.safe_dump({"rule_files": ["empty.yaml"], "evaluation_interval": "1m", "tests": [test]}))
    result = run_rule_tests([path])
    assert result.ok, result
