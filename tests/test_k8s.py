"""The generated Kubernetes objects: valid against their published schemas, consistent with each other, and
carrying a scale-out query that real Prometheus evaluates as intended."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pydantic
import pytest
import yaml
from cloudcoil.models.keda.v1alpha1 import ScaledObject
from cloudcoil.models.prometheus_operator.v1 import PodMonitor, PrometheusRule, ServiceMonitor
from hypothesis import given
from hypothesis import strategies as st

from slokit import schema
from slokit.cli import app
from slokit.commands.exporter import exporter_app
from slokit.exporters.gpu.poller import parse_uuid_list
from slokit.generate import generate_all, k8s
from slokit.schema import Sli
from slokit.spec import Spec, load_spec, load_spec_text

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
CRD_DIR = ROOT / "tests" / "data" / "crds"  # upstream CRDs, vendored unmodified (sources in its README.md)
KUBERNETES_VERSIONS = ("1.29", kubernetes_validate.latest_version())
CORE_KINDS = {"ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler"}
CUSTOM_MODELS: dict[str, type[pydantic.BaseModel]] = {
    "PodMonitor": PodMonitor,
    "ServiceMonitor": ServiceMonitor,
    "PrometheusRule": PrometheusRule,
    "ScaledObject": ScaledObject,
}
CRD_FILES = {
    "PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
    "ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
    "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
    "ScaledObject": "keda.sh_scaledobjects.yaml",
}


def generated(specs: list[Spec]) -> dict[str, Any]:
    """exporters/ files of `generate_all`, parsed back from the text the writer produced."""
    return {path: yaml.safe_load(text) for path, text in generate_all(specs).items() if path.startswith("exporters/")}


@pytest.fixture(scope="module")
def specs() -> list[Spec]:
    return [load_spec(path) for path in EXAMPLES]


@pytest.fixture(scope="module")
def objects(specs: list[Spec]) -> dict[str, Any]:
    return generated(specs)


def unknown_keys(data: Any, model: pydantic.BaseModel, path: str = "") -> Iterator[str]:
    """Keys in `data` the typed model does not define: what `kubectl apply --validate=strict` rejects.

    The cloudcoil models ignore unknown keys; dumping the parsed model and comparing keys finds them, while
    free-form maps (labels, KEDA trigger metadata) survive the round trip and pass.
    """
    dumped = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
    yield from _missing(data, dumped, path)


def _missing(data: Any, dumped: Any, path: str) -> Iterator[str]:
    if isinstance(data, dict):
        for key, value in data.items():
            here = f"{path}.{key}" if path else str(key)
            if not isinstance(dumped, dict) or key not in dumped:
                yield here
            else:
                yield from _missing(value, dumped[key], here)
    elif isinstance(data, list) and isinstance(dumped, list):
        for index, (item, back) in enumerate(zip(data, dumped, strict=False)):
            yield from _missing(item, back, f"{path}[{index}]")


def validate_custom(data: dict[str, Any]) -> list[str]:
    """Problems with a custom resource: model validation errors, then unknown keys."""
    model = CUSTOM_MODELS[data["kind"]]
    try:
        parsed = model.model_validate(data)
    except pydantic.ValidationError as error:
        return [str(error)]
    return [f"unknown key {key}" for key in unknown_keys(data, parsed)]


@functools.cache
def strict_crd_schema(kind: str, version: str) -> dict[str, Any]:
    """The CRD's openAPIV3Schema with unknown keys forbidden wherever the schema lists properties."""
    path = CRD_DIR / CRD_FILES[kind]
    crd = yaml.safe_load(path.read_text(encoding="utf-8"))
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            found: dict[str, Any] = copy.deepcopy(entry["schema"]["openAPIV3Schema"])
            _forbid_unknown(found)
            return found
    raise AssertionError(f"{path.name} has no version {version}")


def _forbid_unknown(node: Any) -> None:
    if isinstance(node, dict):
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        for value in node.values():
            _forbid_unknown(value)
    elif isinstance(node, list):
        for item in node:
            _forbid_unknown(item)


# ==============================================================================================================
# Schemas
# ==============================================================================================================
def test_every_example_generates_the_deployment_side(objects: dict[str, Any], specs: list[Spec]) -> None:
    for spec in specs:
        assert objects[f"exporters/{spec.service}-podmonitor.yaml"]["kind"] == "PodMonitor"
        assert objects[f"exporters/{spec.service}-prometheus-adapter.yaml"]["kind"] == "ConfigMap"
        assert objects[f"exporters/{spec.service}.prometheusrule.yaml"]["kind"] == "PrometheusRule"
        has_spec_map = f"exporters/{spec.service}-configmap.yaml" in objects
        assert has_spec_map == (spec.source.name == "slokit")  # vLLM's own metrics need no plugin
    per_model = [data for data in objects.values() if data["kind"] == "Deployment"]
    assert len(per_model) == sum(len(spec.models) for spec in specs)
    assert sum(d["kind"] == "Service" for d in objects.values()) == len(per_model)
    # Two HPAs and two ScaledObjects per model: reactive and predictive (every example model is sized).
    for kind, suffix in (("ScaledObject", "-keda.yaml"), ("HorizontalPodAutoscaler", "-hpa.yaml")):
        predictive = [p for p, d in objects.items() if d["kind"] == kind and p.endswith("-predictive" + suffix)]
        assert len(predictive) == len(per_model)
        assert sum(d["kind"] == kind for d in objects.values()) == 2 * len(per_model)
    for spec in specs:
        config = yaml.safe_load(objects[f"exporters/{spec.service}-prometheus-adapter.yaml"]["data"]["config.yaml"])
        exposed = {rule["name"]["as"] for rule in config["externalRules"]}
        assert exposed == {schema.EXTERNAL_SCALE_OUT_METRIC, schema.EXTERNAL_AUTOSCALE_DESIRED_METRIC}


ENGINE_SPECS = ROOT / "tests" / "data" / "engines"
SOURCE_SPECS = {
    "slokit": ROOT / "examples" / "assistant.yaml",
    "vllm": ROOT / "examples" / "assistant-vllm.yaml",
    "tgi": ENGINE_SPECS / "tgi-source.yaml",
    **{name: ENGINE_SPECS / f"{name}.yaml" for name in ("sglang", "trtllm", "dynamo", "llm-d", "otel-genai")},
}


@pytest.mark.parametrize("source", sorted(SOURCE_SPECS))
def test_only_vllm_is_deployed_and_other_engines_are_watched_where_they_run(source: str) -> None:
    """vLLM (its own metrics or slokit's plugin) gets its Deployment, Service and GPU sidecar; any other engine or
    gateway runs from its own chart, so slokit writes no Deployment for it (one running `vllm serve` would be
    wrong), scrapes its own metrics port and path, and tells each autoscaler which Deployment to aim at."""
    spec = load_spec(str(SOURCE_SPECS[source]))
    assert spec.source.name == source
    objects = generated([spec])
    kinds = [data["kind"] for data in objects.values()]
    deploys = spec.source.deploys_engine
    assert deploys == (source in ("slokit", "vllm"))
    assert ("Deployment" in kinds) == deploys and ("Service" in kinds) == deploys
    monitors = [data for data in objects.values() if data["kind"] == "PodMonitor"]
    assert bool(monitors) == spec.source.scraped == (source != "otel-genai")
    for monitor in monitors:
        assert validate_custom(monitor) == []
        labels = monitor["spec"]["selector"]["matchLabels"]
        endpoints = monitor["spec"]["podMetricsEndpoints"]
        if deploys:
            assert labels["app.kubernetes.io/component"] == "server"
            assert [e["port"] for e in endpoints] == [k8s.VLLM_PORT_NAME, k8s.GPU_PORT_NAME]
        else:
            assert labels["app.kubernetes.io/component"] == spec.source.pod_component
            assert [(e["port"], e["path"]) for e in endpoints] == [(spec.source.metrics_port, spec.source.metrics_path)]
    scalers = [data for data in objects.values() if data["kind"] in ("HorizontalPodAutoscaler", "ScaledObject")]
    assert bool(scalers) == any(k8s.has_scale_out_signal(spec, model) for model in spec.models)
    for scaler in scalers:
        note = scaler["metadata"]["annotations"][f"{k8s.DOMAIN}/note"]
        assert ("scaleTargetRef.name" in note) == (not deploys), note
    if source == "trtllm":
        assert monitors[0]["spec"]["podMetricsEndpoints"][0]["path"] == "/prometheus/metrics"
    if source == "llm-d":
        assert "not the endpoint picker" in scalers[0]["metadata"]["annotations"][f"{k8s.DOMAIN}/note"]


def test_a_predictive_only_model_still_gets_the_adapter_rules_its_hpa_reads() -> None:
    """Without a TTFT objective there is no reactive signal (no reactive autoscaler, and k8s writes no adapter
    rules), but the engine model still sizes the model: the predictive HPA's adapter rules come with it."""
    text = (ROOT / "examples" / "summarize.yaml").read_text()
    without_ttft = re.sub(r"\n      ttft:\n        objective: \{[^}]*\}\n", "\n", text)
    assert without_ttft != text
    objects = generated([load_spec_text(without_ttft, "summarize.yaml")])
    kinds = {path.rsplit("/", 1)[1]: data["kind"] for path, data in objects.items()}
    assert "summarize-qwen2-72b-hpa.yaml" not in kinds  # no reactive signal
    assert kinds["summarize-qwen2-72b-predictive-hpa.yaml"] == "HorizontalPodAutoscaler"
    assert kinds["summarize-prometheus-adapter.yaml"] == "ConfigMap"


def test_kubernetes_doc_has_a_row_for_every_engine_slokit_does_not_deploy() -> None:
    from slokit import sources

    text = (ROOT / "docs" / "kubernetes.md").read_text()
    rows = [line for line in text.split("## Engines slokit does not deploy")[1].splitlines() if line.startswith("| `")]
    for source in sources.all_sources():
        row = next((r for r in rows if r.startswith(f"| `{source.name}`")), None)
        assert (row is None) == source.deploys_engine, source.name
        if row is None:
            continue
        if source.scraped:
            for value in (source.pod_component, source.metrics_port, source.metrics_path):
                assert f"`{value}`" in row, (source.name, value)
        else:
            assert "no PodMonitor" in row, source.name


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_core_objects_pass_the_strict_kubernetes_schemas(objects: dict[str, Any], version: str) -> None:
    checked = 0
    for data in objects.values():
        if data["kind"] in CORE_KINDS:
            kubernetes_validate.validate(data, version, strict=True)
            checked += 1
    assert checked >= 10


def test_custom_resources_pass_their_typed_models_with_no_unknown_keys(objects: dict[str, Any]) -> None:
    kinds = set()
    for path, data in objects.items():
        if data["kind"] in CUSTOM_MODELS:
            assert validate_custom(data) == [], path
            kinds.add(data["kind"])
    assert kinds == {"PodMonitor", "PrometheusRule", "ScaledObject"}  # the rules generator's object included


def test_custom_resources_pass_the_upstream_crd_schemas(objects: dict[str, Any]) -> None:
    for path, data in objects.items():
        if data["kind"] in CRD_FILES:
            crd_schema = strict_crd_schema(data["kind"], data["apiVersion"].split("/")[1])
            errors = sorted(jsonschema.Draft7Validator(crd_schema).iter_errors(data), key=str)
            assert not errors, f"{path}: {errors[0].message} at {list(errors[0].absolute_path)}"


@pytest.mark.parametrize(
    ("kind", "where", "key"),
    [
        ("PodMonitor", ("spec", "podMetricsEndpoints", 0), "intervall"),
        ("ScaledObject", ("spec",), "minReplicas"),  # the HPA's spelling, not KEDA's
        ("ScaledObject", ("spec", "triggers", 0), "metric_type"),
        ("PrometheusRule", ("spec", "groups", 0), "rule"),
    ],
)
def test_the_strict_checks_catch_a_misspelt_key(
    objects: dict[str, Any], kind: str, where: tuple[str | int, ...], key: str
) -> None:
    data = copy.deepcopy(next(d for d in objects.values() if d["kind"] == kind))
    node: Any = data
    for part in where:
        node = node[part]
    node[key] = "x"
    assert any(key in problem for problem in validate_custom(data))
    crd_schema = strict_crd_schema(kind, data["apiVersion"].split("/")[1])
    assert list(jsonschema.Draft7Validator(crd_schema).iter_errors(data))


def test_kubernetes_validate_catches_a_misspelt_core_key(objects: dict[str, Any]) -> None:
    data = copy.deepcopy(next(d for d in objects.values() if d["kind"] == "Deployment"))
    data["spec"]["template"]["spec"]["containers"][1]["livenessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(data, KUBERNETES_VERSIONS[-1], strict=True)


# ==============================================================================================================
# The objects agree with each other and with the rest of slokit
# ==============================================================================================================
def _containers(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}


def test_selectors_ports_volumes_and_targets_line_up(objects: dict[str, Any]) -> None:
    deployments = {d["metadata"]["name"]: d for d in objects.values() if d["kind"] == "Deployment"}
    monitors = [d for d in objects.values() if d["kind"] == "PodMonitor"]
    for name, dep in deployments.items():
        pod = dep["spec"]["template"]
        labels = pod["metadata"]["labels"]
        assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
        ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        monitor = [m for m in monitors if m["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        assert len(monitor) == 1, name
        assert {e["port"] for e in monitor[0]["spec"]["podMetricsEndpoints"]} == ports == {"http", "gpu-metrics"}
        volumes = {v["name"] for v in pod["spec"]["volumes"]}
        for container in pod["spec"]["containers"]:
            assert {m["name"] for m in container.get("volumeMounts", [])} <= volumes
        for kind in ("HorizontalPodAutoscaler", "ScaledObject", "Service"):
            (other,) = [d for d in objects.values() if d["kind"] == kind and d["metadata"]["name"] == name]
            if kind == "Service":
                assert other["spec"]["selector"].items() <= labels.items()
            else:
                assert other["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}


def test_the_vllm_container_gets_the_spec_and_its_gpus(specs: list[Spec], objects: dict[str, Any]) -> None:
    for spec in specs:
        for model in spec.models:
            dep = objects[f"exporters/{k8s.deployment_name(spec, model)}-deployment.yaml"]
            vllm = _containers(dep)["vllm"]
            assert vllm["resources"]["limits"]["nvidia.com/gpu"] == str(model.tensor_parallel)
            args = vllm["args"]
            assert args[args.index("--served-model-name") + 1] == model.name
            assert args[args.index("--max-num-seqs") + 1] == str(model.max_num_seqs)
            env = {e["name"]: e["value"] for e in vllm["env"]}
            if spec.source.name == "slokit":
                configmap = objects[f"exporters/{spec.service}-configmap.yaml"]
                mount = next(m for m in vllm["volumeMounts"] if m["name"] == "slokit-spec")
                key = env["SLOKIT_SPEC"].removeprefix(mount["mountPath"] + "/")
                reloaded = load_spec_text(configmap["data"][key], key)
                assert (
                    dataclasses.replace(reloaded, path=spec.path) == spec
                )  # the plugin inside vLLM reads exactly the spec the rules came from
                assert dep["spec"]["template"]["metadata"]["annotations"]["slokit.dev/spec-digest"] == spec.digest
            else:
                assert "SLOKIT_SPEC" not in env
                assert vllm["image"].startswith("vllm/vllm-openai:")


def test_the_sidecar_watches_the_gpu_file_the_vllm_container_writes(objects: dict[str, Any]) -> None:
    command = exporter_app.registered_commands[0]
    for dep in (d for d in objects.values() if d["kind"] == "Deployment"):
        containers = _containers(dep)
        sidecar = containers["gpu-exporter"]
        args = sidecar["args"]
        gpu_file = args[args.index("--gpus-file") + 1]
        script = containers["vllm"]["command"][2]
        assert f"> {gpu_file}.tmp && mv {gpu_file}.tmp {gpu_file}" in script
        assert script.rstrip().endswith('exec vllm serve "$@"')
        shlex.split(script)  # well-formed shell words
        assert args[:2] == ["exporter", "gpu"] and command.name == "gpu"
        assert int(args[args.index("--port") + 1]) == sidecar["ports"][0]["containerPort"] == schema.GPU_EXPORTER_PORT
        assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "gpu-metrics"}
        assert "nvidia.com/gpu" not in json.dumps(sidecar["resources"])  # asks for no GPUs of its own


def test_the_sidecar_arguments_are_accepted_by_the_real_cli(objects: dict[str, Any]) -> None:
    from typer.main import get_command

    root = get_command(app)
    dep = next(d for d in objects.values() if d["kind"] == "Deployment")
    args = _containers(dep)["gpu-exporter"]["args"]
    ctx = root.make_context("slokit", list(args[:2]), resilient_parsing=True)
    group = root.get_command(ctx, args[0])  # type: ignore[attr-defined]
    sub = group.get_command(ctx, args[1])
    assert sub is not None
    parsed = sub.make_context("gpu", list(args[2:]))  # raises on an unknown option or a bad value
    assert parsed.params["gpus_file"] == Path(args[args.index("--gpus-file") + 1])


def test_autoscalers_target_the_spec_fraction_after_the_spec_hold(specs: list[Spec], objects: dict[str, Any]) -> None:
    for spec in specs:
        for model in spec.models:
            name = k8s.deployment_name(spec, model)
            hpa = objects[f"exporters/{name}-hpa.yaml"]["spec"]
            keda = objects[f"exporters/{name}-keda.yaml"]["spec"]
            external = hpa["metrics"][0]["external"]
            assert external["metric"]["name"] == k8s.EXTERNAL_METRIC
            assert external["metric"]["selector"]["matchLabels"] == {"service": spec.service, "model": model.name}
            fraction = spec.alerting.scale_out.fraction_of_slo
            assert external["target"] == {"type": "Value", "value": k8s.quantity(fraction)}
            trigger = keda["triggers"][0]
            assert float(trigger["metadata"]["threshold"]) == fraction
            assert trigger["metadata"]["query"] == k8s.scale_out_query(spec, model)
            hold = int(spec.alerting.scale_out.for_)
            assert hpa["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == hold
            assert keda["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == hpa["behavior"]


def test_the_rules_record_the_signal_the_autoscalers_read(objects: dict[str, Any], specs: list[Spec]) -> None:
    for spec in specs:
        rule = objects[f"exporters/{spec.service}.prometheusrule.yaml"]
        records = {r.get("record") for g in rule["spec"]["groups"] for r in g["rules"]}
        assert schema.RECORD_SCALE_OUT in records, spec.service


def test_custom_histogram_buckets_reach_the_vllm_command_line() -> None:
    text = (EXAMPLES[0].parent / "assistant-vllm.yaml").read_text()
    text = text.replace('vllm: {version: "0.32"}', 'vllm: {version: "0.32", custom_histogram_buckets: '
                        '{time_to_first_token: [0.1, 0.25, 0.3, 0.5, 0.75, 1, 2.5]}}')  # fmt: skip
    spec = load_spec_text(text, "custom.yaml")
    dep = k8s.deployment(spec, spec.models[0])
    args = _containers(dep)["vllm"]["args"]
    flag = json.loads(args[args.index("--custom-histogram-buckets") + 1])
    assert flag == {"time_to_first_token": [0.1, 0.25, 0.3, 0.5, 0.75, 1.0, 2.5]}


def test_a_model_without_a_ttft_objective_gets_no_autoscaler() -> None:
    text = (EXAMPLES[0].parent / "summarize.yaml").read_text()
    text = text.replace("      ttft:\n        objective: {percentile: 90, threshold: 5s}\n", "")
    spec = load_spec_text(text, "summarize.yaml")
    assert not any(Sli.TTFT in rc.slos for rc in spec.classes)
    out = k8s.files(spec)
    assert not [path for path in out if path.endswith(("-hpa.yaml", "-keda.yaml", "-prometheus-adapter.yaml"))]
    assert "exporters/summarize-qwen2-72b-deployment.yaml" in out


def test_the_output_is_deterministic(specs: list[Spec]) -> None:
    for spec in specs:
        assert k8s.files(spec) == k8s.files(spec)


# ==============================================================================================================
# Names and quantities
# ==============================================================================================================
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@given(st.lists(st.text(min_size=1, max_size=80), min_size=1, max_size=3))
def test_object_names_are_always_valid_dns_labels(parts: list[str]) -> None:
    name = k8s.object_name(*parts)
    assert DNS_1035.match(name) and len(name) <= 63, name


def test_object_names_keep_clean_names_and_separate_cleaned_ones() -> None:
    assert k8s.object_name("assistant", "llama-3-70b") == "assistant-llama-3-70b"
    a = k8s.object_name("svc", "meta-llama/Llama-3-70B")
    b = k8s.object_name("svc", "meta-llama/llama-3-70b")
    assert a != b and a.startswith("svc-meta-llama-llama-3-70b-")


@pytest.mark.parametrize(("value", "text"), [(0.8, "800m"), (1.0, "1"), (0.75, "750m"), (2.0, "2")])
def test_quantities(value: float, text: str) -> None:
    assert k8s.quantity(value) == text


# ==============================================================================================================
# The queries, evaluated by real Prometheus (promtool)
# ==============================================================================================================
@pytest.mark.prometheus
def test_keda_and_adapter_queries_take_the_worst_class_of_one_model(
    promtool_path: str, specs: list[Spec], tmp_path: Path
) -> None:
    spec = next(s for s in specs if s.service == "assistant")
    model = spec.models[0]
    adapter = k8s.adapter_rules()["externalRules"][0]
    matchers = f'service="{spec.service}",model="{model.name}"'  # what the adapter builds from the HPA selector
    adapter_query = (
        adapter["metricsQuery"].replace("<<.Series>>", schema.RECORD_SCALE_OUT).replace("<<.LabelMatchers>>", matchers)
    )
    rules = {
        "groups": [
            {
                "name": "autoscaler-queries",
                "rules": [
                    {"record": "test:keda:value", "expr": k8s.scale_out_query(spec, model)},
                    {"record": "test:adapter:value", "expr": adapter_query},
                ],
            }
        ]
    }
    series, m = schema.RECORD_SCALE_OUT, model.name
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f'{series}{{service="assistant",model="{m}",class="chat"}}', "values": "0.5x10"},
                    {"series": f'{series}{{service="assistant",model="{m}",class="code"}}', "values": "0.9x10"},
                    {"series": f'{series}{{service="assistant",model="other",class="chat"}}', "values": "3x10"},
                    {"series": f'{series}{{service="elsewhere",model="{m}",class="chat"}}', "values": "5x10"},
                ],
                "promql_expr_test": [
                    {"expr": "test:keda:value", "eval_time": "5m", "exp_samples": [{"labels": "test:keda:value",
                                                                                     "value": 0.9}]},
                    {"expr": "test:adapter:value", "eval_time": "5m",
                     "exp_samples": [{"labels": "test:adapter:value", "value": 0.9}]},
                ],
            }
        ],
    }  # fmt: skip
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(tests))
    checked = subprocess.run(
        [promtool_path, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_adapter_config_has_only_keys_prometheus_adapter_reads(objects: dict[str, Any]) -> None:
    allowed = {"seriesQuery", "seriesFilters", "resources", "name", "metricsQuery"}
    for data in objects.values():
        if data["kind"] == "ConfigMap" and "config.yaml" in data["data"]:
            config = yaml.safe_load(data["data"]["config.yaml"])
            assert set(config) == {"externalRules"}
            records = {schema.RECORD_SCALE_OUT, schema.RECORD_AUTOSCALE_DESIRED}
            for rule in config["externalRules"]:
                assert set(rule) <= allowed
                assert set(rule["name"]) <= {"matches", "as"}
                assert rule["resources"] == {"namespaced": False}
                # Each rule's name pattern matches exactly one of the two recorded series it exposes.
                assert sum(bool(re.fullmatch(rule["name"]["matches"], record)) for record in records) == 1


@pytest.mark.vllm
def test_vllm_serve_accepts_the_generated_command_line(specs: list[Spec]) -> None:
    """vLLM's own `vllm serve` parser and validation read the container arguments as meant."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
    text = (EXAMPLES[0].parent / "assistant-vllm.yaml").read_text()
    text = text.replace('vllm: {version: "0.32"}', 'vllm: {version: "0.32", custom_histogram_buckets: '
                        '{time_to_first_token: [0.1, 0.25, 0.3, 0.5, 0.75, 1, 2.5]}}')  # fmt: skip
    for spec in [*specs, load_spec_text(text, "custom.yaml")]:
        for model in spec.models:
            args = _containers(k8s.deployment(spec, model))["vllm"]["args"]
            parsed = parser.parse_args(["serve", *args])
            ServeSubcommand().validate(parsed)
            assert parsed.model_tag == args[0]
            assert parsed.served_model_name == [model.name]
            assert parsed.tensor_parallel_size == model.tensor_parallel
            assert parsed.max_num_seqs == model.max_num_seqs
            assert parsed.port == k8s.VLLM_PORT
            if spec.vllm.custom_histogram_buckets:
                assert parsed.custom_histogram_buckets == {"time_to_first_token": [0.1, 0.25, 0.3, 0.5, 0.75, 1.0, 2.5]}


@pytest.mark.parametrize("smi", ["works", "fails", "missing"])
def test_the_vllm_entry_script_writes_the_gpu_file_and_always_starts_vllm(tmp_path: Path, smi: str) -> None:
    """The generated shell, run by a real /bin/sh with stand-ins for nvidia-smi and vllm on PATH."""
    spec = load_spec(EXAMPLES[0])
    vllm = _containers(k8s.deployment(spec, spec.models[0]))["vllm"]
    gpu_file = tmp_path / "run" / "gpus"
    gpu_file.parent.mkdir()
    script = vllm["command"][2].replace(k8s.GPU_FILE, str(gpu_file))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    uuids = ["GPU-8e2f3c1a-0000-4000-8000-000000000001", "GPU-1c0a9b7d-0000-4000-8000-000000000002"]
    if smi != "missing":
        body = "printf '%s\\n' " + " ".join(uuids) if smi == "works" else "echo 'NVIDIA-SMI has failed' >&2; exit 9"
        (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\n{body}\n")
    (bin_dir / "vllm").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/vllm-args\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    if smi == "missing":
        env["PATH"] = str(bin_dir)  # no nvidia-smi anywhere; mv and printf come from the shell or bin_dir
        for tool in ("mv", "printf"):
            found = shutil.which(tool, path="/usr/bin:/bin")
            if found:
                (bin_dir / tool).symlink_to(found)
    result = subprocess.run(
        ["/bin/sh", "-c", script, *vllm["command"][3:], *vllm["args"]], env=env, capture_output=True, text=True,
        timeout=30,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "vllm-args").read_text().split() == ["serve", *vllm["args"]]
    if smi == "works":
        assert parse_uuid_list(gpu_file.read_text()) == tuple(uuids)
    else:
        assert not gpu_file.exists()
        assert "the gpu-exporter sidecar will watch none" in result.stderr


@pytest.mark.prometheus
def test_the_autoscalers_read_what_the_generated_rules_record_from_raw_histograms(
    promtool_path: str, tmp_path: Path
) -> None:
    """Raw TTFT histograms -> the rules generator's rules -> the KEDA and adapter queries, in promtool."""
    from slokit.generate import rules as rules_generator
    from slokit.units import format_le

    spec = load_spec(EXAMPLES[0].parent / "assistant.yaml")
    model = spec.models[0]
    rule_file = rules_generator.files(spec)[rules_generator.rules_path(spec)]
    adapter = k8s.adapter_rules()["externalRules"][0]["metricsQuery"]
    matchers = f'service="{spec.service}",model="{model.name}"'
    adapter_query = adapter.replace("<<.Series>>", schema.RECORD_SCALE_OUT).replace("<<.LabelMatchers>>", matchers)
    rule_file["groups"].append(
        {
            "name": "autoscaler-queries",
            "rules": [
                {"record": "test:keda", "expr": k8s.scale_out_query(spec, model)},
                {"record": "test:adapter", "expr": adapter_query},
            ],
        }
    )
    # Chat's objective is p95 within 500 ms (5% may be slower); the scale-out boundary is 0.8 x 500 = 400 ms. Of
    # 1000 requests a minute, 943 take 200 ms and 57 take 450 ms: 5.7% above the boundary, 0.8 x 5.7% / 5% = 0.912,
    # just under 1 and above the 0.8 target: both autoscalers would add replicas.
    chat = next(rc for rc in spec.classes if rc.name == "chat")
    bucket = spec.latency_metric(schema.Sli.TTFT, chat) + "_bucket"
    series = []
    for le in [*(format_le(b) for b in spec.buckets(schema.Sli.TTFT)), "+Inf"]:
        bound = float("inf") if le == "+Inf" else float(le)
        per_minute = (943 if bound >= 0.2 else 0) + (57 if bound >= 0.45 else 0)
        scope = "".join(f'{k}="{v}",' for k, v in model.selector.items())  # the spec's deployment scope
        labels = f'{scope}model="{model.name}",class="chat",engine="0",le="{le}"'
        series.append({"series": f"{bucket}{{{labels}}}", "values": f"0+{per_minute}x60"})
    checks = [
        ("test:keda > bool 0.9", 1), ("test:keda < bool 1", 1), ("test:adapter == bool test:keda", 1),
        (f"test:keda > bool {spec.alerting.scale_out.fraction_of_slo}", 1),
    ]  # fmt: skip
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {"expr": expr, "eval_time": "30m", "exp_samples": [{"labels": "{}", "value": value}]}
                    for expr, value in checks
                ],
            }
        ],
    }
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_file, sort_keys=False))
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    checked = subprocess.run(
        [promtool_path, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
