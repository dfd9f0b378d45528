"""Issue 32, items 10, 13, 14, 16 and 17: what a first deployment hit in `probe`, `plan`, `import`/`export` and
`init`, each checked through the command a user runs.

The probe is pointed at a port that was bound and closed (nothing listens there), so a refused connection is
certain without any server; the planner's numbers are checked against the terms it prints, so "bound" cannot name
one term while another is larger.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from slokit.cli import app
from slokit.interop.importers import _objective
from slokit.interop.importing import read_files
from slokit.interop.model import BUCKETS_ANNOTATION
from slokit.schema import Sli
from slokit.spec import load_spec

runner = CliRunner()


def closed_port() -> int:
    """A loopback port that was just free: bound, then closed, so a connection to it is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# ==============================================================================================================
# Item 10: probe against a closed port
# ==============================================================================================================
def test_probe_without_model_at_a_closed_port_says_connection_refused() -> None:
    port = closed_port()
    result = runner.invoke(app, ["probe", f"http://127.0.0.1:{port}", "-c", "1", "-n", "2"])
    assert result.exit_code == 1, result.output
    assert f"connection refused at 127.0.0.1:{port}" in result.stderr
    assert "pass --model" not in result.stderr  # the model name is not what is missing


def test_probe_with_model_at_a_closed_port_is_bound_by_the_error_rate() -> None:
    port = closed_port()
    result = runner.invoke(app, ["probe", f"http://127.0.0.1:{port}", "--model", "m", "-n", "2"])  # the search
    assert result.exit_code == 1, result.output
    assert "bound by: 100.0% of requests failed, at most 1.0% allowed" in result.stdout
    assert "n/a" not in result.output and "nan" not in result.output
    assert "no req/s measured" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"nothing could be measured: connection refused at 127.0.0.1:{port} (every request failed to connect)"
    )


def test_probe_json_at_a_closed_port_names_the_error_rate_and_the_refused_address() -> None:
    port = closed_port()
    argv = ["probe", f"http://127.0.0.1:{port}", "--model", "m", "-c", "2", "-n", "3", "--json"]
    result = runner.invoke(app, argv)
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["binding_constraint"]["kind"] == "errors"
    assert doc["binding_constraint"]["value"] == 1.0
    assert doc["unreachable"] == f"connection refused at 127.0.0.1:{port}"
    assert doc["levels"][0]["failures"] == {"connect": 3}


# ==============================================================================================================
# Item 13: plan with a TP group larger than a server
# ==============================================================================================================
def plan_json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["plan", *args, "--json"])
    assert result.exit_code == 0, result.output
    found: dict[str, Any] = json.loads(result.stdout)["plans"][0]
    return found


def largest_term(memory: float, compute: float, communication: float) -> str:
    roof_name, roof = ("memory", memory) if memory >= compute else ("compute", compute)
    return "communication" if communication > roof else roof_name


@pytest.mark.parametrize(
    "args",
    [
        ("--model", "llama-3-70b", "--gpu", "h100-sxm", "--tp", "16", "--context", "2048"),
        ("--model", "llama-3-70b", "--gpu", "h100-pcie", "--tp", "8", "--context", "2048"),
        ("--model", "llama-3-70b", "--gpu", "h100-sxm", "--tp", "8", "--context", "2048"),
        ("--model", "llama-3-8b", "--gpu", "l40s", "--tp", "4", "--context", "1024", "--concurrency", "64"),
        ("--model", "mixtral-8x7b", "--gpu", "a100-80gb", "--tp", "8", "--pp", "2", "--context", "4096"),
    ],
)
def test_plan_bound_names_the_largest_term(args: tuple[str, ...]) -> None:
    found = plan_json(*args)
    for step in (found["decode"]["at_batch_1"], found["decode"]["at_max_batch"]):
        communication = step["tp_communication_seconds"] + step["pp_communication_seconds"]
        terms = (step["memory_floor_seconds"], step["compute_floor_seconds"], communication)
        assert step["bound"] == largest_term(*terms), (step, terms)
    pre = found["prefill"]
    terms = (pre["memory_floor_seconds"], pre["compute_floor_seconds"], pre["tp_communication_seconds"])
    assert pre["bound"] == largest_term(*terms)


def test_plan_tp_16_spans_two_servers_and_its_all_reduces_cross_the_network() -> None:
    args = ("--model", "llama-3-70b", "--gpu", "h100-sxm", "--tp", "16", "--context", "2048")
    found = plan_json(*args)
    assert found["inputs"]["link"] == "nvlink+network"
    assert found["inputs"]["tp_nodes"] == 2 and found["inputs"]["tp_gpus_per_node"] == 8
    # by hand, one token (batch 1): 8192 x 2 bytes; inside a server a ring of 8 over NVLink (450 GB/s, 8 us), across
    # the two servers a ring of 2 over each GPU's 400 Gb/s NIC carrying 1/8 of the message (25 us); 2 per layer
    message = 8192 * 2.0
    inside = 8e-6 + 2 * 7 / 8 * message / 450e9
    across = 25e-6 + 2 * 1 / 2 * (message / 8) / 50e9
    one = found["decode"]["at_batch_1"]
    assert one["tp_communication_seconds"] == pytest.approx(2 * 80 * (inside + across))
    assert one["bound"] == "communication"  # 5.3 ms of all-reduces against 2.6 ms of reading weights
    notes = " ".join(found["notes"])
    assert "TP 16 spans 2 servers of 8 x h100-sxm" in notes
    assert "--tp 8 --pp 2 keeps every all-reduce inside a server" in notes
    text = runner.invoke(app, ["plan", *args])
    assert "(TP 16 over 2 servers)" in text.stdout.splitlines()[0]
    assert "communication-bound" in text.stdout


def test_plan_network_flags_change_the_cross_server_term_and_are_checked() -> None:
    base = ("--model", "llama-3-70b", "--gpu", "h100-sxm", "--tp", "16", "--context", "2048")
    slow = plan_json(*base, "--network-gbps", "100", "--network-latency", "0.05ms")
    fast = plan_json(*base)
    assert (
        slow["decode"]["at_batch_1"]["tp_communication_seconds"]
        > fast["decode"]["at_batch_1"]["tp_communication_seconds"]
    )
    assert slow["inputs"]["network_one_direction_bytes_per_second"] == pytest.approx(12.5e9)
    bad = runner.invoke(app, ["plan", *base, "--network-gbps", "0"])
    assert bad.exit_code == 2 and "network bandwidth must be positive" in bad.stderr


def test_plan_help_and_code_agree_that_communication_is_not_divided_by_efficiency() -> None:
    found = plan_json("--model", "llama-3-70b", "--gpu", "h100-sxm", "--tp", "8", "--context", "2048")
    efficiency = found["inputs"]["efficiency_ratio"]
    step = found["decode"]["at_max_batch"]
    roof = max(step["memory_floor_seconds"], step["compute_floor_seconds"])
    assert step["itl_expected_seconds"] == pytest.approx(roof / efficiency + step["tp_communication_seconds"])
    help_text = " ".join(runner.invoke(app, ["plan", "--help"], env={"COLUMNS": "400"}).stdout.split())
    assert "Every time is a lower bound divided by --efficiency" not in help_text
    assert "Memory and compute times are lower bounds divided by --efficiency; communication is added" in help_text
    assert "communication is not" in help_text  # the --efficiency option says so too
    notes = " ".join(found["notes"])
    assert "every time here is a lower bound divided by efficiency" not in notes
    assert "communication is added undivided" in notes


# ==============================================================================================================
# Item 14: export openslo, then import, keeps the histogram's buckets
# ==============================================================================================================
def test_openslo_round_trip_keeps_the_buckets_and_the_scale_out_boundary(tmp_path: Path) -> None:
    spec_path, exported, back = tmp_path / "slo.yaml", tmp_path / "slo.openslo.yaml", tmp_path / "back.yaml"
    assert runner.invoke(app, ["init", "-o", str(spec_path)]).exit_code == 0
    assert runner.invoke(app, ["export", "openslo", str(spec_path), "-o", str(exported)]).exit_code == 0
    result = runner.invoke(app, ["import", str(exported), "-o", str(back)])
    assert result.exit_code == 0, result.output
    original, imported = load_spec(spec_path), load_spec(back)
    for rc in original.classes:
        for sli in rc.slos:
            if rc.slos[sli].objective is not None:
                assert imported.histogram_buckets(imported.request_class(rc.name), sli) == (
                    original.histogram_buckets(rc, sli)
                ), (rc.name, sli)
    chat = imported.request_class("chat")
    assert 0.4 in imported.histogram_buckets(chat, Sli.TTFT)  # 0.8 x the 500ms objective
    shown = runner.invoke(app, ["validate", str(back)])
    assert "scale-out: more than 5.00% of requests above 400ms" in shown.stdout, shown.output


def test_import_of_a_millisecond_histogram_writes_its_buckets_in_milliseconds(tmp_path: Path) -> None:
    sli_doc = openslo_sli("openslo/v1", "lat", GOOD_MS, TOTAL_MS, {BUCKETS_ANNOTATION: "50,100,240,300,1000"})
    slo_doc = openslo_slo("openslo/v1", "lat", "lat")
    source = tmp_path / "in.yaml"
    source.write_text(yaml.safe_dump_all([sli_doc, slo_doc]))
    result = runner.invoke(app, ["import", str(source), "-o", str(tmp_path / "out.yaml")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "out.yaml").read_text()
    assert "buckets: [50, 100, 240, 300, 1000]" in text and "unit: ms" in text
    spec = load_spec(tmp_path / "out.yaml")
    assert spec.histogram_buckets(spec.classes[0], Sli.E2E) == pytest.approx((0.05, 0.1, 0.24, 0.3, 1.0))


@pytest.mark.parametrize("value", ["50,40,300", "abc", "50,100", "-1,300", "0,300"])
def test_a_malformed_buckets_annotation_is_left_out_with_a_warning(value: str) -> None:
    good, total = GOOD_MS, TOTAL_MS
    found = _objective("f.yaml", "lat", "OpenSLO v1 SLO", None, "", 99.0, 86400.0, good, total,
                       annotations={BUCKETS_ANNOTATION: value})  # fmt: skip
    assert found.buckets is None
    assert any(w.startswith("buckets: ") and "default ladder" in w for w in found.warnings)


GOOD_MS = 'sum(rate(http_request_duration_milliseconds_bucket{job="web",le="300"}[5m]))'
TOTAL_MS = 'sum(rate(http_request_duration_milliseconds_count{job="web"}[5m]))'


def openslo_sli(
    api: str, name: str, good: str, total: str, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """An OpenSLO SLI document: a ratio of two Prometheus queries."""
    metadata: dict[str, Any] = {"name": name, **({"annotations": annotations} if annotations else {})}
    source = {"type": "Prometheus"}
    ratio = {
        "counter": True,
        "good": {"metricSource": {**source, "spec": {"query": good}}},
        "total": {"metricSource": {**source, "spec": {"query": total}}},
    }
    return {"apiVersion": api, "kind": "SLI", "metadata": metadata, "spec": {"ratioMetric": ratio}}


def openslo_slo(api: str, name: str, sli: str) -> dict[str, Any]:
    """An OpenSLO SLO document: 99% of the referenced SLI's events over a rolling 28 days."""
    spec = {
        "service": "web",
        "indicatorRef": sli,
        "timeWindow": [{"duration": "28d", "isRolling": True}],
        "budgetingMethod": "Occurrences",
        "objectives": [{"target": 0.99}],
    }
    return {"apiVersion": api, "kind": "SLO", "metadata": {"name": name}, "spec": spec}


# ==============================================================================================================
# Item 16: the first steps a new user takes read clean
# ==============================================================================================================
ROOT = Path(__file__).resolve().parent.parent


def test_the_init_example_validates_without_a_warning(tmp_path: Path) -> None:
    target = tmp_path / "slo.yaml"
    assert runner.invoke(app, ["init", "-o", str(target)]).exit_code == 0
    result = runner.invoke(app, ["validate", str(target)])
    assert result.exit_code == 0, result.output
    assert result.stderr == "", result.stderr  # no "warning: page tier 1h/5m adapted ..."
    assert "adapted" not in result.stdout


def test_the_init_example_is_the_assistant_example_with_its_burn_rate_tiers_spelled_out(tmp_path: Path) -> None:
    target = tmp_path / "slo.yaml"
    assert runner.invoke(app, ["init", "-o", str(target)]).exit_code == 0
    bundled, example = load_spec(target), load_spec(ROOT / "examples" / "assistant.yaml")
    assert bundled.classes == example.classes and bundled.models == example.models
    assert bundled.alerting.burn_rates[1:] == example.alerting.burn_rates  # the workbook's four, after a fast page
    fast = bundled.alerting.burn_rates[0]
    assert (fast.severity, fast.long, fast.short) == ("page", 600.0, 300.0)


def test_generate_help_names_every_folder_generate_writes(tmp_path: Path) -> None:
    spec_path, out = tmp_path / "slo.yaml", tmp_path / "deploy"
    assert runner.invoke(app, ["init", "-o", str(spec_path)]).exit_code == 0
    written = runner.invoke(app, ["generate", str(spec_path), "-o", str(out), "--no-promtool"])
    assert written.exit_code == 0, written.output
    folders = sorted(p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert "alertmanager" in folders
    help_text = runner.invoke(app, ["generate", "--help"], env={"COLUMNS": "200"}).stdout
    for folder in folders:
        assert f"{folder}/:" in help_text, folder


def test_readme_plan_spec_line_promises_gpus_only_with_concurrency(tmp_path: Path) -> None:
    line = next(
        text for text in (ROOT / "README.md").read_text().splitlines() if text.startswith("slokit plan --spec slo.yaml")
    )
    comment = line.partition("#")[2]
    spec_path = tmp_path / "slo.yaml"
    assert runner.invoke(app, ["init", "-o", str(spec_path)]).exit_code == 0
    found = plan_json("--spec", str(spec_path))
    assert found["sizing"]["gpus"] is None  # what the line's command gives: no GPU count without a peak
    assert "GPUs" not in comment or "--concurrency" in comment, line
    with_peak = plan_json("--spec", str(spec_path), "--concurrency", "300")
    assert with_peak["sizing"]["gpus"] is not None


# ==============================================================================================================
# Item 17: import as teams actually write it
# ==============================================================================================================
def pyrra_doc(api: str | None, success: str, total: str) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kind": "ServiceLevelObjective",
        "metadata": {"name": "api-latency", "namespace": "monitoring"},
        "spec": {
            "target": "99",
            "window": "28d",
            "indicator": {"latency": {"success": {"metric": success}, "total": {"metric": total}}},
        },
    }
    if api is not None:
        doc["apiVersion"] = api
    return doc


GOOD_S = 'http_request_duration_seconds_bucket{job="api",le="0.5"}'
TOTAL_S = 'http_request_duration_seconds_count{job="api"}'


@pytest.mark.parametrize(("api", "written"), [("v1alpha1", "'v1alpha1'"), (None, "none given")])
def test_a_pyrra_object_without_its_api_group_is_read_as_pyrra(tmp_path: Path, api: str | None, written: str) -> None:
    source = tmp_path / "pyrra.yaml"
    source.write_text(yaml.safe_dump(pyrra_doc(api, GOOD_S, TOTAL_S)))
    result = read_files([source])
    assert [(o.kind, o.threshold, o.percentile) for o in result.objectives] == [
        ("Pyrra ServiceLevelObjective", 0.5, 99.0)
    ]
    (notice,) = result.notices
    assert (notice.construct, notice.skipped) == ("apiVersion", False)
    assert f"{written} read as pyrra.dev/v1alpha1 (from kind ServiceLevelObjective with spec.indicator)" in str(notice)
    cli = runner.invoke(app, ["import", str(source), "-o", str(tmp_path / "slo.yaml")])
    assert cli.exit_code == 0, cli.output
    assert "read as pyrra.dev/v1alpha1" in cli.stderr
    load_spec(tmp_path / "slo.yaml")


def test_openslo_v1_under_the_openslo_com_group_is_read_as_openslo_v1(tmp_path: Path) -> None:
    good = 'sum(rate(http_request_duration_seconds_bucket{job="web",le="0.3"}[5m]))'
    total = 'sum(rate(http_request_duration_seconds_count{job="web"}[5m]))'
    sli = openslo_sli("openslo.com/v1", "lat", good, total)
    slo = openslo_slo("openslo.com/v1", "web-latency", "lat")  # its indicatorRef resolves: the SLI is read as v1 too
    source = tmp_path / "openslo.yaml"
    source.write_text(yaml.safe_dump_all([sli, slo]))
    result = read_files([source])
    assert [(o.kind, o.threshold, o.percentile) for o in result.objectives] == [("OpenSLO v1 SLO", 0.3, 99.0)]
    assert [str(n) for n in result.notices] == [
        f"{source}: web-latency: converted with a change: apiVersion: 'openslo.com/v1' read as openslo/v1 "
        "(from its group openslo.com)"
    ]


def test_a_groupless_openslo_slo_and_a_groupless_sloth_object_are_recognised_by_shape(tmp_path: Path) -> None:
    good = 'sum(rate(x_seconds_bucket{job="web",le="0.3"}[5m]))'
    total = 'sum(rate(x_seconds_count{job="web"}[5m]))'
    slo = {
        "apiVersion": "v1",
        "kind": "SLO",
        "metadata": {"name": "inline"},
        "spec": {
            "indicator": {"metadata": {"name": "i"}, "spec": {"ratioMetric": {"good": {"metricSource": {
                "type": "Prometheus", "spec": {"query": good}}}, "total": {"metricSource": {
                "type": "Prometheus", "spec": {"query": total}}}}}},
            "timeWindow": [{"duration": "28d", "isRolling": True}],
            "objectives": [{"target": 0.95}],
        },
    }  # fmt: skip
    sloth = {
        "apiVersion": "v1",
        "kind": "PrometheusServiceLevel",
        "metadata": {"name": "sloth-one"},
        "spec": {"service": "web", "slos": [{"name": "lat", "objective": 99, "sli": {"events": {
            "errorQuery": f"{total} - {good}",
            "totalQuery": total}}}]},
    }  # fmt: skip
    source = tmp_path / "mixed.yaml"
    source.write_text(yaml.safe_dump_all([slo, sloth]))
    result = read_files([source])
    assert [o.kind for o in result.objectives] == ["OpenSLO v1 SLO", "Sloth PrometheusServiceLevel"]
    assumed = [n.detail for n in result.notices if n.construct == "apiVersion"]
    assert assumed == [
        "'v1' read as openslo/v1 (from kind SLO with spec.objectives and an indicator)",
        "'v1' read as sloth.slok.dev/v1 (from kind PrometheusServiceLevel with spec.slos)",
    ]


def test_a_kubernetes_v1_service_is_not_taken_for_an_openslo_document(tmp_path: Path) -> None:
    source = tmp_path / "svc.yaml"
    source.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "vllm"},
                                      "spec": {"ports": [{"port": 8000}]}}))  # fmt: skip
    result = read_files([source])
    assert not result.objectives
    assert [(n.construct, n.skipped) for n in result.notices] == [("document", True)]
    assert "not a Pyrra, Sloth or OpenSLO SLO" in result.notices[0].detail


def test_a_pyrra_good_selector_with_a_status_regex_converts_with_a_warning_naming_it(tmp_path: Path) -> None:
    success = 'http_request_duration_seconds_bucket{job="api",code=~"2..",le="0.5"}'
    source = tmp_path / "pyrra.yaml"
    source.write_text(yaml.safe_dump(pyrra_doc("pyrra.dev/v1alpha1", success, TOTAL_S)))
    result = read_files([source])
    (objective,) = result.objectives
    assert objective.matchers == (("job", "=", "api"),)  # the total's series
    assert objective.good_only == (("code", "=~", "2.."),)
    (notice,) = result.notices
    assert (notice.construct, notice.skipped) == ("good selector narrower than the total", False)
    assert 'also matches code=~"2.."' in notice.detail and "dropped" in notice.detail
    assert "Failed requests that answer fast now count as good" in notice.detail
    cli = runner.invoke(app, ["import", str(source), "-o", str(tmp_path / "slo.yaml")])
    assert cli.exit_code == 0, cli.output
    text = (tmp_path / "slo.yaml").read_text()
    assert '# good events also had to match code=~"2.." there (the total did not); dropped here' in text
    load_spec(tmp_path / "slo.yaml")


def test_the_published_nginx_pyrra_latency_slo_converts_and_its_5xx_good_selector_is_called_a_slip() -> None:
    result = read_files([ROOT / "tests" / "data" / "interop" / "pyrra" / "nginx.yaml"])
    assert [o.slo for o in result.objectives] == ["nginx-api-latency"]
    warned = [n for n in result.notices if n.construct == "good selector narrower than the total"]
    assert len(warned) == 1 and not warned[0].skipped
    assert 'status=~"5.."' in warned[0].detail and "slip" in warned[0].detail


@pytest.mark.parametrize(
    "success",
    [
        'http_request_duration_seconds_bucket{job="other",le="0.5"}',  # a different value: not a narrowing
        'http_request_duration_seconds_bucket{le="0.5"}',  # wider than the total
    ],
)
def test_a_good_selector_that_does_not_narrow_the_total_is_still_refused(tmp_path: Path, success: str) -> None:
    source = tmp_path / "pyrra.yaml"
    source.write_text(yaml.safe_dump(pyrra_doc("pyrra.dev/v1alpha1", success, TOTAL_S)))
    result = read_files([source])
    assert not result.objectives
    assert [n.construct for n in result.notices] == ["good selector differs from the total beyond le"]
