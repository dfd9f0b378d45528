"""`slokit autoscale`: the replay, its policies, the HPA's decision, the history readers and bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from slokit.autoscale.compare import run_model
from slokit.autoscale.engine import EngineModel, Objectives, Workload, capacity, from_plan, shares
from slokit.autoscale.history import read_history, shaped, write_openmetrics
from slokit.autoscale.hpa import Hpa
from slokit.autoscale.replay import Config
from slokit.cli import app
from slokit.schema import Sli
from slokit.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent
SUMMARIZE = ROOT / "examples" / "summarize.yaml"
TWO_MODELS = ROOT / "examples" / "assistant-vllm.yaml"
# llm-d's benchmark shape: 2 req/s, up to 10, down to 1 (seconds from the start -> req/s).
RAMP: dict[float, float] = {0: 2.0, 600: 2.0, 1800: 10.0, 3000: 10.0, 4200: 1.0, 4800: 1.0}


def _ramp_file(tmp_path: Path, spec_path: Path, model: str) -> Path:
    spec = load_spec(str(spec_path))
    path = tmp_path / "ramp.om"
    with path.open("w", encoding="utf-8") as handle:
        write_openmetrics(spec, shaped(spec, model, RAMP, start=1_767_225_600), handle)
    return path


def test_ramp_replay_writes_every_policy_and_slokit_meets_the_bar(tmp_path: Path) -> None:
    traffic = _ramp_file(tmp_path, SUMMARIZE, "qwen2-72b")
    result = CliRunner().invoke(
        app, ["autoscale", str(SUMMARIZE), "--traffic", str(traffic), "-o", str(tmp_path / "o")]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "o" / "autoscale.json").read_text())
    policies = doc["policies"]
    assert list(policies) == ["static", "reactive", "queue", "llm-d", "slokit"]
    model = doc["models"]["qwen2-72b"]
    # Static runs its replicas for the whole 80 minutes, 4 GPUs each (TP 4): GPU-hours from first principles.
    assert policies["static"]["gpu_hours"] == pytest.approx(model["static_replicas"] * 4 * 80 / 60, abs=1e-3)
    assert policies["static"]["scale_events"] == 0
    for figures in policies.values():
        assert 0 <= figures["attainment"] <= 1
    slokit = policies["slokit"]
    assert slokit["attainment"] >= 0.99
    assert slokit["gpu_hours"] <= 0.7 * policies["static"]["gpu_hours"]
    for other in ("reactive", "queue", "llm-d"):
        assert slokit["attainment"] > policies[other]["attainment"], other
    svg = (tmp_path / "o" / "autoscale.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<polyline") == 1 + 2 * 5  # load, then replicas and TTFT per policy
    assert "| slokit |" in (tmp_path / "o" / "autoscale.md").read_text()


def test_a_missed_burst_raises_the_headroom_for_the_next_one() -> None:
    """The same sudden doubling twice, two hours apart: before the second the predictive policy runs more engines
    than before the first (the miss raised its headroom), and the second burst costs fewer requests."""
    spec = load_spec(str(SUMMARIZE))
    burst = {0: 4.0, 1200: 4.0, 1260: 8.0, 2400: 8.0, 2460: 4.0, 9600: 4.0, 9660: 8.0, 10800: 8.0, 10860: 4.0,
             12000: 4.0}  # fmt: skip
    traffic = shaped(spec, "qwen2-72b", burst, start=1_767_225_600)
    tick = 5.0
    line = run_model(spec, traffic, spec.models[0], ["slokit"], Config(tick=tick)).timelines["slokit"]

    def at(seconds: float) -> int:
        return line.provisioned[round(seconds / tick)]

    def lost(start: float, end: float) -> float:
        span = slice(round(start / tick), round(end / tick))
        return sum(sum(line.total[c][span]) - sum(line.within_all[c][span]) for c in line.total)

    assert at(9500) > at(1100)  # the same 4 req/s, before each burst
    assert lost(9600, 10900) < 0.5 * lost(1200, 2500)


def test_a_miss_is_counted_beyond_noise_and_above_half_an_engine() -> None:
    from slokit.autoscale.policies import SignalSettings, headroom_of, miss

    s = SignalSettings(capacity=10.0)
    # 4 standard deviations of two 1m rates at 20 req/s: 4 x sqrt(2 x 20 / 60) = 3.27 req/s.
    assert miss(s, 20.0, 20.0) == pytest.approx((20 - 4 * math.sqrt(40 / 60)) / 20)
    assert miss(s, 23.0, 20.0) < 1  # 15% over the forecast is within noise at this rate
    assert miss(s, 40.0, 20.0) > 1.8  # a doubling is not
    assert miss(s, 40.0, 4.9) is None  # a forecast under half an engine's load is not judged
    assert headroom_of(s, 0.0) == s.headroom and headroom_of(s, 1.6) == pytest.approx(0.6)
    assert headroom_of(s, 5.0) == s.max_headroom


def test_unknown_policy_is_refused_with_the_valid_names(tmp_path: Path) -> None:
    traffic = _ramp_file(tmp_path, SUMMARIZE, "qwen2-72b")
    argv = ["autoscale", str(SUMMARIZE), "--traffic", str(traffic), "--policy", "hpa", "-o", str(tmp_path / "o")]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2
    assert "--policy hpa: no such policy; valid policies: static, reactive, queue, llm-d, slokit" in result.output
    assert not (tmp_path / "o").exists()


def test_history_without_traffic_for_a_model_is_refused(tmp_path: Path) -> None:
    traffic = _ramp_file(tmp_path, TWO_MODELS, "llama-3-70b")  # the spec also serves llama-3-8b
    result = CliRunner().invoke(
        app, ["autoscale", str(TWO_MODELS), "--traffic", str(traffic), "-o", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert f"{traffic}: no requests for model 'llama-3-8b' in the history" in result.output
    assert "Traceback" not in result.output
    # Naming the model that has traffic replays it.
    argv = ["autoscale", str(TWO_MODELS), "--traffic", str(traffic), "--model", "llama-3-70b", "--policy", "static",
            "-o", str(tmp_path / "o")]  # fmt: skip
    assert CliRunner().invoke(app, argv).exit_code == 0


def test_an_slo_no_batch_meets_is_refused(tmp_path: Path) -> None:
    text = SUMMARIZE.read_text().replace("ttft:\n        objective: {percentile: 90, threshold: 5s}",
                                         "ttft:\n        objective: {percentile: 90, threshold: 10ms}")  # fmt: skip
    assert "10ms" in text
    spec_path = tmp_path / "tight.yaml"
    spec_path.write_text(text)
    traffic = _ramp_file(tmp_path, SUMMARIZE, "qwen2-72b")
    result = CliRunner().invoke(
        app, ["autoscale", str(spec_path), "--traffic", str(traffic), "-o", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert "model qwen2-72b, class batch: the engine model cannot meet the SLO at any batch" in result.output
    assert "ttft" in result.output


def test_history_round_trip_and_a_simulated_history(tmp_path: Path) -> None:
    spec = load_spec(str(SUMMARIZE))
    traffic = read_history(spec, _ramp_file(tmp_path, SUMMARIZE, "qwen2-72b"))
    (batch,) = traffic.classes
    assert traffic.step == 60 and len(batch.rate) == 80
    assert batch.rate[0] == pytest.approx(2.0) and max(batch.rate) == pytest.approx(10.0)
    assert batch.rate[35] == pytest.approx(10.0) and batch.rate[-1] == pytest.approx(1.0)
    result = CliRunner().invoke(app, ["simulate", str(SUMMARIZE), "--days", "0.05", "--end", "1767225600",
                                      "--incidents", "/dev/null", "-o", str(tmp_path / "h.om")])  # fmt: skip
    assert result.exit_code == 0, result.output
    simulated = read_history(spec, tmp_path / "h.om")
    (sim,) = simulated.classes
    # simulate: 2 replicas at 85% of max_num_seqs / 8 s each, times the diurnal curve (0.15-1): a few req/s.
    assert all(0 < r < 2 * 0.85 * 128 / 8 * 2 for r in sim.rate)
    assert all(p > 0 for p in sim.prompt_mean)


def test_probe_log_is_binned_by_scheduled_time(tmp_path: Path) -> None:
    spec = load_spec(str(SUMMARIZE))
    rows = ["level,run,t_sched,t_done,prompt_tokens,output_tokens"]
    rows += [f"0,0,{t},{t + 1},5000,400" for t in (0.5, 1.5, 12.0)]
    rows += [f"1,0,{t},{t + 1},7000,200" for t in (0.0, 3.0)]
    (tmp_path / "requests.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "probe.json").write_text(json.dumps({"class": "batch", "model": "qwen2-72b"}))
    traffic = read_history(spec, tmp_path)
    (batch,) = traffic.classes
    # Level 0 ends at 13 s, so level 1 starts at 14 s: arrivals at 0.5, 1.5 | 12 | 14, 17.
    assert [round(r * 10) for r in batch.rate] == [2, 3]
    assert batch.prompt_mean[0] == 5000 and batch.prompt_mean[1] == pytest.approx((5000 + 14000) / 3)


def test_hpa_follows_the_behavior_rules() -> None:
    behavior = {
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 60}]},
        "scaleDown": {"stabilizationWindowSeconds": 120, "selectPolicy": "Min",
                      "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]},
    }  # fmt: skip
    hpa = Hpa(1.0, True, behavior, 1, 20)
    hpa.start(2)
    assert hpa.decide(0, 2, 10) == 4  # wants 10, at most +100% of 2 per minute
    assert hpa.decide(30, 4, 10) == 4  # still within the minute that began at 2
    assert hpa.decide(61, 4, 10) == 8  # a new minute: 4 -> 8
    assert hpa.decide(122, 8, 2) == 8  # down wanted, but 10 was recommended within the last 120 s
    assert hpa.decide(200, 8, 2) == 7  # past the window: down, one pod per minute
    assert hpa.decide(230, 7, 2) == 7
    assert hpa.decide(261, 7, 7.5) == 7  # 7.5 / 7 is within the 10% tolerance: hold


def test_generated_scaled_object_decides_as_the_replay_did(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The committed predictive ScaledObject and HPA, read back, make every decision the replay's slokit policy
    made."""
    spec = load_spec(str(SUMMARIZE))
    traffic = read_history(spec, _ramp_file(tmp_path, SUMMARIZE, "qwen2-72b"))
    decisions: list[tuple[float, int, float, int]] = []
    original = Hpa.decide

    def logged(self: Hpa, now: float, current: int, value: float) -> int:
        out = original(self, now, current, value)
        decisions.append((now, current, value, out))
        return out

    monkeypatch.setattr(Hpa, "decide", logged)
    run = run_model(spec, traffic, spec.models[0], ["slokit"], Config(tick=10))
    monkeypatch.undo()
    assert len({d[3] for d in decisions}) > 3  # it scaled
    ceiling = max(2 * run.static_replicas, run.static_replicas + 4)  # the replay's ceiling for every autoscaler
    for kind in ("keda", "hpa"):  # the ScaledObject and the HPA variant decide alike
        committed = yaml.safe_load((ROOT / "exporters" / f"summarize-qwen2-72b-predictive-{kind}.yaml").read_text())
        hpa = Hpa.from_object(committed, max_replicas=ceiling)
        hpa.start(decisions[0][1])
        for now, current, value, out in decisions:
            assert hpa.decide(now, current, value) == out, (kind, now, current, value)


def test_capacity_grows_with_a_looser_objective_and_shares_fall_with_queueing() -> None:
    spec = load_spec(str(SUMMARIZE))
    engine = from_plan(spec, spec.models[0])
    work = Workload(tuple(float(x) for x in range(4000, 12000, 125)), (400.0,) * 64)
    tight = Objectives({Sli.E2E: 20.0}, {Sli.E2E: 0.99})
    loose = Objectives({Sli.E2E: 40.0}, {Sli.E2E: 0.99})
    assert capacity(engine, work, loose, label="x") > capacity(engine, work, tight, label="x") > 0
    calm = shares(engine, work, tight, 10, 0.0, 0.5)
    queued = shares(engine, work, tight, 10, 15.0, 0.5)
    assert queued.by_sli[Sli.E2E] < calm.by_sli[Sli.E2E]


def test_closed_loop_prediction_follows_the_step_law() -> None:
    engine = EngineModel(step0=0.010, step1=0.002, prefill0=0.005, prefill1=0.0001, max_num_seqs=8, gpus=1,
                         source="test")  # fmt: skip
    work = Workload((100.0,) * 10, (1000.0,) * 10)
    one, four = (engine_predict(engine, work, c) for c in (1, 4))
    # ITL median is the step itself (few steps carry a prefill): 12 ms at one user, 18 ms at four.
    assert one["itl_p50"] == pytest.approx(0.012) and four["itl_p50"] == pytest.approx(0.018)
    # TTFT: prefill (15 ms) plus part of a step; the median about half a step.
    assert 0.015 < one["ttft_p50"] < 0.015 + 0.012
    assert math.isclose(four["ttft_p95"] - 0.015, 0.018 * 15.5 / 16, rel_tol=1e-9)


def test_probe_fit_recovers_the_laws_despite_a_stalled_request() -> None:
    from slokit.autoscale.engine import ProbeLevel, fit_probe

    prompts = [20 + 12 * i for i in range(16)]
    step = {1: 0.004, 4: 0.007}  # step0 3 ms, 1 ms per running sequence

    def ttfts(users: int) -> list[float]:
        # prefill 8 ms + 0.1 ms per token, plus half a step in flight
        return [0.008 + 0.0001 * p + step[users] / 2 for p in prompts]

    stalled = ttfts(1)
    stalled[0] = 0.5  # one request waited out a scheduler stall: 60x its prefill
    levels = [ProbeLevel(1, step[1], stalled, prompts), ProbeLevel(4, step[4], ttfts(4), prompts)]
    engine = fit_probe(levels, 4, 1, "test")
    assert engine.step0 == pytest.approx(0.003) and engine.step1 == pytest.approx(0.001)
    assert engine.prefill0 == pytest.approx(0.008, rel=0.02) and engine.prefill1 == pytest.approx(0.0001, rel=0.02)


def engine_predict(engine: EngineModel, work: Workload, users: int) -> dict[str, float]:
    from slokit.autoscale.engine import predict_closed_loop

    return predict_closed_loop(engine, work, users)


@pytest.mark.prometheus
@pytest.mark.parametrize("spec_path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.stem)
def test_generated_signal_passes_its_promtool_test_and_a_broken_one_fails(
    spec_path: Path, tmp_path: Path, promtool_path: str
) -> None:
    """The committed predictive rules, with their promtool test; then the default headroom, or the noise a forecast
    miss must exceed, changed in the rule file (the replay's `signal` unchanged) must fail that test."""
    from slokit.local.prometheus import run_rule_tests

    spec = load_spec(str(spec_path))
    for name in (f"{spec.service}.autoscale.rules.yaml", f"{spec.service}.autoscale.rules.test.yaml"):
        (tmp_path / name).write_text((ROOT / "rules" / name).read_text())
    tested = run_rule_tests([tmp_path / f"{spec.service}.autoscale.rules.test.yaml"])
    assert tested.ok, tested.output[-4000:]
    rules = tmp_path / f"{spec.service}.autoscale.rules.yaml"
    text = rules.read_text()
    for before, after in ((" - 1, 0.25, 1)", " - 1, 0.3, 1)"), (" - 4 * sqrt(", " - 3 * sqrt(")):
        assert text.count(before) == 1, before
        rules.write_text(text.replace(before, after))
        broken = run_rule_tests([tmp_path / f"{spec.service}.autoscale.rules.test.yaml"])
        assert not broken.ok, after
