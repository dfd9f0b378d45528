"""`slokit plan` through the real command line: tables, JSON, exit codes and the errors a user sees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from slokit.cli import app
from slokit.commands.plan import UsageError, parse_count

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["plan", *args])
    return result.exit_code, result.stdout, result.stderr


def plans(stdout: str) -> list[dict[str, Any]]:
    document = json.loads(stdout)
    found: list[dict[str, Any]] = document["plans"]
    return found


def test_preset_plan_prints_a_short_table() -> None:
    code, out, _ = run(
        "--model", "llama-3-70b", "--gpu", "h100-sxm", "--tp", "8", "--context", "4096",
        "--itl-slo", "40ms", "--concurrency", "500",
    )  # fmt: skip
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("llama-3-70b on 8 x h100-sxm (TP 8)")
    assert any("weights per GPU" in line and "fits" in line for line in lines)
    assert any(line.strip().startswith("sizing") and "engines" in line for line in lines)
    assert any("lower bound" in line for line in lines)
    assert len(lines) < 20


def test_spec_plan_without_concurrency_says_what_a_gpu_count_needs() -> None:
    code, out, _ = run("--spec", str(ROOT / "examples" / "assistant.yaml"))
    assert code == 0, out
    sizing = [line for line in out.splitlines() if line.strip().startswith("sizing")]
    assert sizing and all("pass --concurrency N" in line for line in sizing)
    code, out, _ = run("--spec", str(ROOT / "examples" / "assistant.yaml"), "--json")
    for plan in plans(out):
        assert plan["sizing"]["engines"] is None and plan["sizing"]["needs"] == "--concurrency"
    code, out, _ = run("--spec", str(ROOT / "examples" / "assistant.yaml"), "--concurrency", "300", "--json")
    for plan in plans(out):
        assert plan["sizing"]["needs"] is None and plan["sizing"]["engines"] >= 1


def test_json_has_every_input_term_and_result_with_units() -> None:
    code, out, _ = run(
        "--model", "llama-3-8b", "--gpu", "h100-sxm", "--context", "2048", "--itl-slo", "30ms",
        "--ttft-slo", "500ms", "--concurrency", "100", "--json",
    )  # fmt: skip
    assert code == 0
    (only,) = plans(out)
    assert only["inputs"]["itl_slo_seconds"] == pytest.approx(0.03)
    assert only["inputs"]["hbm_bandwidth_bytes_per_second"] == 3.35e12
    assert only["memory"]["kv_per_token_bytes"] == 131_072
    assert only["decode"]["at_batch_1"]["memory_floor_seconds"] > 0
    assert only["decode"]["at_max_batch"]["itl_expected_seconds"] <= 0.03
    assert only["sizing"]["engines"] >= 1 and only["sizing"]["gpus"] == only["sizing"]["engines"]
    assert only["with_8bit_kv_cache"]["kv_per_token_bytes"] == 65_536
    # every number sits under a key that names its unit, or is a count or flag
    counts = {
        "layers", "hidden_size", "attention_heads", "kv_heads", "head_dim", "experts", "experts_per_token",
        "tensor_parallel", "pipeline_parallel", "gpus_per_engine", "max_num_seqs", "engines", "gpus",
        "min_tensor_parallel_to_fit", "tp_nodes", "tp_gpus_per_node", "engine_nodes",
    }  # fmt: skip
    units = ("_bytes", "_seconds", "_per_second", "_tokens", "_ratio", "_sequences", "_params", "_flops")

    def walk(node: dict[str, Any]) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value)
            elif isinstance(value, int | float) and not isinstance(value, bool):
                assert key in counts or key.endswith(units), key

    walk(only)


def test_a_model_that_does_not_fit_says_so_and_exits_1() -> None:
    code, out, _ = run("--model", "qwen2-72b", "--gpu", "h100-sxm", "--weight-dtype", "fp16", "--context", "2048")
    assert code == 1
    assert "DOES NOT FIT" in out
    assert "--tp 2" in out


def test_a_missed_itl_slo_exits_1() -> None:
    code, out, _ = run(
        "--model", "llama-3-70b", "--gpu", "a100-80gb", "--tp", "2", "--context", "512", "--itl-slo", "5ms"
    )
    assert code == 1
    assert "cannot be met at any batch" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "llama3-70b", "--gpu", "h100-sxm", "--context", "1"], "did you mean 'llama-3-70b'"),
        (["--model", "llama-3-70b", "--gpu", "h100", "--context", "1"], "did you mean 'h100-pcie' or 'h100-sxm'"),
        (["--model", "llama-3-70b", "--gpu", "h100-sxm"], "--context TOKENS is required"),
        (["--gpu", "h100-sxm", "--context", "1"], "name a model"),
        (["--model", "llama-3-70b", "--context", "1"], "--gpu is required"),
        (["--model", "llama-3-70b", "--gpu", "h100-sxm", "--context", "1", "--itl-slo", "40"], "is not a duration"),
        (["--model", "llama-3-70b", "--gpu", "h100-sxm", "--context", "1", "--tp", "3"], "does not divide"),
        (["--model", "llama-3-70b", "--gpu", "h100-sxm", "--context", "1", "--kv-dtype", "fp4"], "KV-cache dtype"),
        (["--params", "7B", "--layers", "32", "--gpu", "h100-sxm", "--context", "1"], "missing: --kv-heads"),
        (["--params", "x", "--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--hidden", "4096"], "count"),
    ],
)
def test_bad_input_exits_2_with_a_message_that_says_what_would_be_right(args: list[str], message: str) -> None:
    code, out, err = run(*args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err + out


def test_custom_model_from_its_shape() -> None:
    code, out, _ = run(
        "--params", "8.03B", "--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--hidden", "4096",
        "--gpu", "h100-sxm", "--context", "2048", "--json",
    )  # fmt: skip
    assert code == 0
    (custom,) = plans(out)
    _, preset_out, _ = run("--model", "llama-3-8b", "--gpu", "h100-sxm", "--context", "2048", "--json")
    (preset,) = plans(preset_out)
    assert custom["memory"]["kv_per_token_bytes"] == preset["memory"]["kv_per_token_bytes"]
    # the custom shape counts the embedding table as read each step: a little slower than the preset
    assert (
        custom["decode"]["at_batch_1"]["memory_floor_seconds"] >= preset["decode"]["at_batch_1"]["memory_floor_seconds"]
    )


def test_spec_mode_plans_every_model_with_its_slos() -> None:
    code, out, _ = run("--spec", "examples/assistant-vllm.yaml", "--concurrency", "300", "--json")
    assert code == 0
    document = json.loads(out)
    assert document["spec"] == "examples/assistant-vllm.yaml"
    by_model = {p["inputs"]["model"]: p for p in document["plans"]}
    assert set(by_model) == {"llama-3-70b", "llama-3-8b"}
    assert by_model["llama-3-70b"]["inputs"]["itl_slo_seconds"] == pytest.approx(0.05)
    assert by_model["llama-3-8b"]["inputs"]["itl_slo_seconds"] == pytest.approx(0.025)  # its TPOT objective
    assert by_model["llama-3-70b"]["inputs"]["max_num_seqs"] == 256
    # one model only, and a flag overriding the spec
    code, out, _ = run("--spec", "examples/assistant-vllm.yaml", "--model", "llama-3-8b", "--gpu", "h200", "--json")
    assert code == 0
    (only,) = plans(out)
    assert only["inputs"]["gpu"] == "h200"


def test_spec_errors_exit_2() -> None:
    code, _, err = run("--spec", "no-such-spec.yaml")
    assert code == 2
    assert "no such file" in err
    code, _, err = run("--spec", "examples/assistant.yaml", "--model", "llama-3-8b")
    assert code == 2
    assert "unknown model of examples/assistant.yaml" in err


def test_help_teaches_with_examples() -> None:
    result = runner.invoke(app, ["plan", "--help"])
    assert result.exit_code == 0
    assert "slokit plan --model llama-3-70b" in result.stdout
    assert "--efficiency" in result.stdout


def test_parse_count() -> None:
    assert parse_count("70B") == 70e9
    assert parse_count("8.03e9") == 8.03e9
    assert parse_count("7000m") == 7e9
    assert parse_count("1.2T") == 1.2e12
    with pytest.raises(UsageError):
        parse_count("70 GB")


def test_calibration_from_a_measured_itl() -> None:
    code, out, _ = run(
        "--spec", "examples/assistant.yaml", "--measured-itl", "14ms", "--measured-batch", "64", "--json"
    )
    assert code == 0
    (only,) = plans(out)
    assert only["calibration"]["measured_itl_seconds"] == pytest.approx(0.014)
    assert 0.3 < only["calibration"]["efficiency_ratio"] < 1
    assert only["inputs"]["efficiency_ratio"] == only["calibration"]["efficiency_ratio"]
    code, _, err = run("--spec", "examples/assistant.yaml", "--measured-itl", "14ms")
    assert code == 2 and "--measured-batch" in err
    code, _, err = run("--spec", "examples/assistant-vllm.yaml", "--measured-itl", "14ms", "--measured-batch", "8")
    assert code == 2 and "several models" in err


def test_a_spec_whose_tp_does_not_suit_its_model_names_both(tmp_path: Path) -> None:
    spec = tmp_path / "tp3.yaml"
    spec.write_text(
        "version: slokit/v1\nservice: svc\nsource: slokit\nwindow: 28d\n"
        "models:\n  - {name: llama-3-70b, gpu: h100-sxm, tensor_parallel: 3}\n"
        "classes:\n  - name: chat\n    slos:\n      itl: {objective: {percentile: 95, threshold: 50ms}}\n",
        encoding="utf-8",
    )
    code, _, err = run("--spec", str(spec))
    assert code == 2
    assert f"{spec}: model llama-3-70b: tensor parallel 3 does not divide" in err
    assert "assuming 2048-token contexts" in err
    code, out, _ = run("--spec", str(spec), "--tp", "4")
    assert code == 0 and "4 x h100-sxm" in out
