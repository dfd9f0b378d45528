"""`slokit demo` without processes: spec checks, the choice of the expected alert, runbook parsing, demo rule
files, the reporters and the command's input errors. The real end-to-end run is in test_demo_e2e.py."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from slokit.cli import app
from slokit.demo import (
    DEMO_SPEC,
    BackgroundLoad,
    DemoInputError,
    LoadLevel,
    LoadTally,
    PlainReporter,
    TerminalReporter,
    alert_matches,
    contract_gaps,
    demo_class,
    expected_alerts,
    first_query,
    linked_guide,
    load_demo_spec,
    runbook_section,
    section_excerpt,
)
from slokit.distributions import parse_distribution
from slokit.generate import alerts, runbook
from slokit.generate.model import AlertKind, AlertRule, heading_anchor
from slokit.generate.rules import rule_groups
from slokit.schema import Sli
from slokit.spec import load_spec

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _rule(name: str, kind: AlertKind, severity: str, *, sli: Sli | None = Sli.TTFT, cls: str = "chat") -> AlertRule:
    title = f"{name} {severity} {cls}"
    return AlertRule(
        name=name,
        expr="vector(1)",
        for_="15s",
        labels={"severity": severity, "service": "demo", "slo": sli.value if sli else "", "model": "m", "class": cls},
        annotations={"summary": "s", "description": "d", "runbook_url": f"runbooks/demo.md#{heading_anchor(title)}"},
        kind=kind,
        anchor=heading_anchor(title),
        title=title,
        model="m",
        request_class=cls,
        sli=sli,
    )


# -- the spec -----------------------------------------------------------------------------------------------------
def test_bundled_demo_spec_is_a_demo_spec_with_a_class_to_degrade() -> None:
    spec = load_demo_spec(DEMO_SPEC)
    assert spec.demo
    request_class = demo_class(spec)
    assert request_class is not None and Sli.TTFT in request_class.slos
    # The flood must exceed what the engine runs at once, or nothing queues.
    assert spec.models[0].max_num_seqs <= 4


def test_production_specs_are_refused_not_changed() -> None:
    path = EXAMPLES / "assistant.yaml"
    before = path.read_text(encoding="utf-8")
    with pytest.raises(DemoInputError, match="not a demo spec"):
        load_demo_spec(path)
    assert path.read_text(encoding="utf-8") == before
    assert not load_spec(path).demo


def test_demo_spec_needs_exactly_one_model(tmp_path: Path) -> None:
    data = yaml.safe_load(DEMO_SPEC.read_text(encoding="utf-8"))
    data["models"].append({"name": "second"})
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(DemoInputError, match="exactly one model"):
        load_demo_spec(path)


# -- the expected alert -------------------------------------------------------------------------------------------
def test_expected_alerts_are_the_pages_on_the_class_ttft_slo() -> None:
    spec = load_demo_spec(DEMO_SPEC)
    rules = [
        _rule("SlokitQueue", AlertKind.QUEUE_OVERLOAD, "critical", sli=None),
        _rule("SlokitBurn", AlertKind.BURN_RATE, "critical"),
        _rule("SlokitTierTicket", AlertKind.TIER, "warning"),
        _rule("SlokitTier", AlertKind.TIER, "critical"),
        _rule("SlokitOtherClass", AlertKind.TIER, "critical", cls="batch"),
        _rule("SlokitItl", AlertKind.TIER, "critical", sli=Sli.ITL),
    ]
    assert [r.name for r in expected_alerts(rules, spec, "chat")] == ["SlokitTier", "SlokitBurn"]
    with pytest.raises(DemoInputError, match="no page"):
        expected_alerts(rules[:1] + rules[2:3], spec, "chat")


def test_expected_alerts_exist_for_the_bundled_demo_spec() -> None:
    from slokit.generate.alerts import alert_instances

    spec = load_demo_spec(DEMO_SPEC)
    found = expected_alerts(alert_instances(spec), spec, "chat")
    assert {r.kind for r in found} == {AlertKind.TIER, AlertKind.BURN_RATE}
    assert all(r.annotations["runbook_url"].endswith("#" + r.anchor) for r in found)


def test_fire_time_is_active_at_plus_for() -> None:
    from slokit.demo import fire_time

    rule = _rule("SlokitTier", AlertKind.TIER, "critical")  # for: 15s
    fired = fire_time({"activeAt": "2026-12-02T16:00:00.123456789Z"}, rule)
    assert fired == pytest.approx(1796227200.123456 + 15, abs=1e-3)
    assert fire_time({"activeAt": "2026-12-02T16:00:00+01:00"}, rule) == pytest.approx(1796223600 + 15)
    assert fire_time({}, rule) is None


def test_alert_matching_and_contract() -> None:
    rule = _rule("SlokitTier", AlertKind.TIER, "critical")
    alert = {"labels": {"alertname": "SlokitTier", **rule.labels, "engine": "0"}, "annotations": rule.annotations}
    assert alert_matches(alert, rule)
    assert contract_gaps(alert) == []
    other_class = {"labels": {**alert["labels"], "class": "batch"}}
    assert not alert_matches(other_class, rule)
    assert not alert_matches({"labels": {**alert["labels"], "alertname": "X"}}, rule)
    bare = {"labels": {"alertname": "SlokitTier", "severity": "critical"}, "annotations": {"summary": "s"}}
    assert contract_gaps(bare) == [
        "label service",
        "label slo",
        "label model",
        "label class",
        "annotation description",
        "annotation runbook_url",
    ]


# -- the runbook ---------------------------------------------------------------------------------------------------
RUNBOOK = """# demo runbook

## SlokitTier critical chat

What fired.

```promql
slokit:latency_seconds:quantile5m{quantile="0.5"} > 1
```

```text
# not a heading inside a fence
```

**Step 1: Queue depth.** Is the engine receiving more than it can serve?

   ```promql
   max by (engine) (
     slokit_requests_waiting{model="m"}
   )
   ```

**Step 2: Decode throughput.**

   ```promql
   sum(rate(slokit_generation_tokens_total[5m]))
   ```

### Detail inside the section

text

## SlokitBurn critical chat

```promql
vector(2)
```
"""


def test_runbook_section_ends_at_the_next_heading_of_its_level() -> None:
    section = runbook_section(RUNBOOK, heading_anchor("SlokitTier critical chat"))
    assert section is not None
    assert section.startswith("## SlokitTier critical chat")
    assert "### Detail inside the section" in section
    assert "SlokitBurn" not in section
    assert runbook_section(RUNBOOK, "missing-anchor") is None
    last = runbook_section(RUNBOOK, heading_anchor("SlokitBurn critical chat"))
    assert last is not None and "vector(2)" in last


def test_first_query_is_the_first_query_of_step_one_not_the_alert_expression() -> None:
    section = runbook_section(RUNBOOK, heading_anchor("SlokitTier critical chat"))
    assert section is not None
    assert first_query(section) == 'max by (engine) (\n     slokit_requests_waiting{model="m"}\n   )'
    assert first_query("## x\n\nno query\n") is None
    assert first_query("## x\n\n```promql\nvector(1)\n```\n") == "vector(1)"


def test_the_alerts_section_links_the_guide_whose_first_step_is_the_queue() -> None:
    """On the generated runbook of the demo spec: the alert's short section, then the guide it links to."""
    spec = load_demo_spec(DEMO_SPEC)
    rule = next(r for r in alerts.alert_rules(spec) if any(m.request_class is not None for m in r.members))
    markdown = runbook.render(spec, alerts.alert_rules(spec))
    section = runbook_section(markdown, rule.anchor)
    assert section is not None and "**Step" not in section
    guide = linked_guide(markdown, section)
    assert guide is not None and guide.startswith("## Debugging\n")  # one guide for the fleet
    (model,) = spec.models  # the demo's one model: the guide's queries name it (no placeholder to fill in)
    query = first_query(guide)
    assert query is not None and spec.metrics.requests_waiting in query and f'model="{model.name}"' in query
    assert linked_guide(markdown, "## x\n\nno link\n") is None


def test_section_excerpt_stops_before_step_two() -> None:
    section = runbook_section(RUNBOOK, heading_anchor("SlokitTier critical chat"))
    assert section is not None
    excerpt = section_excerpt(section)
    assert "Step 1" in excerpt and "Step 2" not in excerpt
    assert excerpt.rstrip().endswith("more lines: the next steps)")


# -- the rule files Prometheus loads ---------------------------------------------------------------------------------
def test_rule_groups_cap_intervals_and_keep_rules() -> None:
    spec = load_demo_spec(DEMO_SPEC)
    plain = rule_groups(spec)
    capped = rule_groups(spec, max_interval=45.0)
    assert [g.name for g in capped] == [g.name for g in plain]
    assert [g.interval for g in capped] == [g.interval if g.interval == "30s" else "45s" for g in plain]
    assert [g.rules for g in capped] == [g.rules for g in plain]  # expressions and `for:` untouched
    assert {g.interval for g in rule_groups(spec, max_interval=2.0)} == {"2s"}


# -- load ------------------------------------------------------------------------------------------------------------
def test_background_load_stops_when_asked() -> None:
    started = threading.Event()

    def forever(level: LoadLevel, tally: LoadTally, stop: threading.Event) -> None:
        started.set()
        while not stop.wait(0.01):
            tally.sent += 1

    level = LoadLevel("t", "http://127.0.0.1:1", "m", "chat", parse_distribution(8), parse_distribution(8))
    load = BackgroundLoad(level, forever).start()
    assert started.wait(5)
    load.stop(timeout=5)
    assert not load.running and load.error is None


# -- output ---------------------------------------------------------------------------------------------------------
def test_plain_reporter_prints_lines_without_escape_codes() -> None:
    stream = io.StringIO()
    out = PlainReporter(stream, live_every=3600)
    out.step("Start")
    out.line("ready", "ok")
    out.live("status 1")
    out.live("status 2")  # throttled
    out.block("a\nb")
    text = stream.getvalue()
    assert "\x1b" not in text
    assert "== 1. Start" in text and "ok: ready" in text
    assert "status 1" in text and "status 2" not in text
    assert "| a\n" in text and "| b\n" in text


def test_terminal_reporter_replaces_the_live_line_and_keeps_it_on_one_row() -> None:
    stream = io.StringIO()
    out = TerminalReporter(stream, width=40)
    out.live("one")
    out.live("two " * 30)
    out.line("done", "ok")
    text = stream.getvalue()
    assert text.count("\r\x1b[2K") == 2
    assert text.endswith("done\x1b[0m\n")
    live = text.split("\r\x1b[2K")[1]
    assert "…" in live and len(live.replace("\x1b[2m", "").replace("\x1b[0m", "")) <= 40


# -- the command ----------------------------------------------------------------------------------------------------
def test_command_refuses_a_production_spec_with_exit_2() -> None:
    result = CliRunner().invoke(app, ["demo", "--spec", str(EXAMPLES / "assistant.yaml")])
    assert result.exit_code == 2
    assert "not a demo spec" in result.output


def test_command_reports_a_missing_spec_with_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "--spec", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "no such file" in result.output
    assert "Traceback" not in result.output


def test_help_explains_the_story_and_exit_codes() -> None:
    result = CliRunner().invoke(app, ["demo", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for words in ("max-num-seqs", "runbook_url", "Ctrl-C", "Exit codes"):
        assert words in result.output


# -- the probe drives the load (against the probe's local emulator; seconds) -----------------------------------------
def test_load_levels_run_to_their_bounds_and_stop_when_asked(tmp_path: Path) -> None:
    import time

    from slokit.demo import run_load
    from slokit.local.emulator import EmulatorConfig, emulator_process

    config = EmulatorConfig(model="m", max_seqs=2, ttft=0.01, itl=0.005)
    with emulator_process(config, tmp_path / "emulator.log") as base:
        healthy = LoadLevel(
            "healthy", base, "m", "chat", parse_distribution(16), parse_distribution(4),
            rate=20.0, max_requests=10, max_seconds=10.0, max_in_flight=1, drain_seconds=2.0,
        )  # fmt: skip
        tally = LoadTally()
        run_load(healthy, tally, threading.Event())
        assert (tally.sent, tally.ok, tally.failed) == (10, 10, 0)

        # A flood that would run for minutes (8 users, 2 slots, 0.5 s per request) stops when asked.
        flood = LoadLevel(
            "flood", base, "m", "chat", parse_distribution(64), parse_distribution(100),
            concurrency=8, max_requests=200, max_seconds=300.0, drain_seconds=1.0,
        )  # fmt: skip
        load = BackgroundLoad(flood).start()
        deadline = time.monotonic() + 60
        while load.tally.sent < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert load.running and load.tally.sent >= 2
        load.stop(timeout=60)
        assert not load.running and load.error is None
        assert 2 <= load.tally.sent < 200


def test_cli_default_healthy_phase_matches_the_demo_config() -> None:
    from slokit.commands.demo import DEFAULT_HEALTHY_SECONDS
    from slokit.demo import DemoConfig

    assert DemoConfig.healthy_seconds == DEFAULT_HEALTHY_SECONDS
