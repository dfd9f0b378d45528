"""The generated PodMonitors give the scraped series exactly the labels every raw selector of the rules asks for.

prometheus-operator turns each PodMonitor endpoint into a Prometheus scrape config (pkg/prometheus/promcfg.go,
`generatePodMonitorConfig`, at the commit tests/data/crds/ comes from): Kubernetes pod discovery in the namespaces
`namespaceSelector` names (none: the PodMonitor's own), then these relabelings in order: `job` copied to a temporary
label, pods that are not running dropped, pods kept by `selector` (matchLabels, then matchExpressions), the target
kept by port name, `namespace`/`container`/`pod` from the pod, `podTargetLabels`, `job` set to
`<PodMonitor namespace>/<PodMonitor name>` (or to the pod label `jobLabel` names), `endpoint` set to the port name,
and last the endpoint's own `relabelings`. `operator_relabel_configs` writes that list; `relabel` applies it as
Prometheus does (and a real Prometheus, given the same config, labels the targets the same way). The Prometheus
object's own options (scrape classes, enforced namespace label, sharding) are at their defaults.

Every raw selector the rule file writes is then checked against the labels of the targets that scrape the models it
names: for the example specs, for a spec with a model in another namespace, one with two jobs in one namespace,
and one whose selector value holds a `$`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from slokit.cli import app
from slokit.generate import generate_all, k8s
from slokit.generate import rules as rules_generator
from slokit.local.prometheus import LocalPrometheus
from slokit.spec import Spec, load_spec, load_spec_text

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
POD_IP = "10.1.2.3"
# Where the PodMonitors are applied (they carry no namespace: the overlay chooses): the models' own namespace, and
# a separate monitoring namespace. Pods of a model whose selector names no namespace run in the overlay's namespace.
PLACEMENTS = ("same-as-pods", "monitoring")
OVERLAY_NAMESPACE = "inference"


# ==============================================================================================================
# prometheus-operator's scrape config for a PodMonitor endpoint, and Prometheus's relabelling
# ==============================================================================================================
def _sanitize(name: str) -> str:
    """prometheus-operator's sanitizeLabelName: every character outside [a-zA-Z0-9_] becomes '_'."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _snake(config: Mapping[str, Any]) -> dict[str, Any]:
    """A CRD RelabelConfig (camelCase) as Prometheus's relabel_config, as generateRelabelConfig writes it."""
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    out = {names.get(key, key): value for key, value in config.items()}
    if "action" in out:
        out["action"] = str(out["action"]).lower()
    return out


def operator_relabel_configs(monitor: Mapping[str, Any], endpoint: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The relabel_configs prometheus-operator generates for one endpoint of one PodMonitor."""
    spec = monitor["spec"]
    meta = monitor["metadata"]
    out: list[dict[str, Any]] = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
        {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"},
    ]
    selector = spec["selector"]
    for key in sorted(selector.get("matchLabels", {})):
        sources = [
            f"__meta_kubernetes_pod_label_{_sanitize(key)}",
            f"__meta_kubernetes_pod_labelpresent_{_sanitize(key)}",
        ]
        out.append({"action": "keep", "source_labels": sources, "regex": f"({selector['matchLabels'][key]});true"})
    for expression in selector.get("matchExpressions", []):
        key = _sanitize(expression["key"])
        both = [f"__meta_kubernetes_pod_label_{key}", f"__meta_kubernetes_pod_labelpresent_{key}"]
        values = "|".join(expression.get("values", []))
        out.append({
            "In": {"action": "keep", "source_labels": both, "regex": f"({values});true"},
            "NotIn": {"action": "drop", "source_labels": both, "regex": f"({values});true"},
            "Exists": {"action": "keep", "source_labels": both[1:], "regex": "true"},
            "DoesNotExist": {"action": "drop", "source_labels": both[1:], "regex": "true"},
        }[expression["operator"]])  # fmt: skip
    out.append({"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": endpoint["port"]})  # fmt: skip
    out += [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    ]
    for label in spec.get("podTargetLabels", []):
        out.append({"source_labels": [f"__meta_kubernetes_pod_label_{_sanitize(label)}"],
                    "target_label": _sanitize(label), "regex": "(.+)", "replacement": "${1}"})  # fmt: skip
    out.append({"target_label": "job", "replacement": f"{meta['namespace']}/{meta['name']}"})
    if spec.get("jobLabel"):
        out.append({"source_labels": [f"__meta_kubernetes_pod_label_{_sanitize(spec['jobLabel'])}"],
                    "target_label": "job", "regex": "(.+)", "replacement": "${1}"})  # fmt: skip
    out.append({"target_label": "endpoint", "replacement": endpoint["port"]})
    out += [_snake(config) for config in endpoint.get("relabelings", [])]
    return out


def discovered_namespaces(monitor: Mapping[str, Any]) -> set[str] | None:
    """Where pod discovery looks (getNamespacesFromNamespaceSelector); None: every namespace."""
    selector = monitor["spec"].get("namespaceSelector", {})
    if selector.get("any"):
        return None
    return set(selector.get("matchNames") or [monitor["metadata"]["namespace"]])


_EXPAND = re.compile(r"\$(?:\$|\{(\w+)\}|(\w+))")


def _expand(template: str, match: re.Match[str]) -> str:
    """Go's regexp.Expand, as Prometheus uses it for `replacement` and `target_label`."""

    def one(found: re.Match[str]) -> str:
        if found.group(0) == "$$":
            return "$"
        name = found.group(1) or found.group(2)
        try:
            return match.group(int(name) if name.isdigit() else name) or ""
        except IndexError:  # no such group: Go expands it to nothing
            return ""

    return _EXPAND.sub(one, template)


def relabel(labels: Mapping[str, str], configs: Sequence[Mapping[str, Any]]) -> dict[str, str] | None:
    """Prometheus's relabelling (model/relabel): the labels after `configs`, or None when the target is dropped."""
    out = dict(labels)
    for config in configs:
        action = config.get("action", "replace")
        value = config.get("separator", ";").join(out.get(name, "") for name in config.get("source_labels", []))
        regex = re.compile(f"^(?:{config.get('regex', '(.*)')})$", re.DOTALL)
        found = regex.match(value)
        if action == "keep" and not found:
            return None
        if action == "drop" and found:
            return None
        if action == "replace":
            if not found:
                continue
            target = _expand(config["target_label"], found)
            result = _expand(config.get("replacement", "$1"), found)
            if result:
                out[target] = result
            else:
                out.pop(target, None)
        elif action not in ("keep", "drop"):
            raise NotImplementedError(f"relabel action {action}: teach this test what Prometheus does")
    return out


def pod_targets(pod: Mapping[str, Any], namespace: str, name: str) -> Iterator[dict[str, str]]:
    """Kubernetes pod discovery: one target per container port, with its __meta_kubernetes_* labels."""
    labels = pod["metadata"]["labels"]
    for container in pod["spec"]["containers"]:
        for port in container.get("ports", []):
            target = {
                "__address__": f"{POD_IP}:{port['containerPort']}",
                "__meta_kubernetes_namespace": namespace,
                "__meta_kubernetes_pod_name": name,
                "__meta_kubernetes_pod_phase": "Running",
                "__meta_kubernetes_pod_container_name": container["name"],
                "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
            }
            for key, value in labels.items():
                target[f"__meta_kubernetes_pod_label_{_sanitize(key)}"] = value
                target[f"__meta_kubernetes_pod_labelpresent_{_sanitize(key)}"] = "true"
            yield target


def final_labels(job_name: str, discovered: Mapping[str, str], configs: Sequence[Mapping[str, Any]]) -> dict | None:
    """A target's labels as Prometheus stores them on every scraped series: `job` = the job name before
    relabelling, `instance` = the address after it when unset, `__` labels dropped."""
    labels = relabel({"job": job_name, **discovered}, configs)
    if labels is None:
        return None
    labels.setdefault("instance", labels["__address__"])
    return {k: v for k, v in labels.items() if not k.startswith("__") and v != ""}


@dataclass(frozen=True)
class Scrape:
    """One scrape config prometheus-operator would write: a PodMonitor endpoint and what discovery finds for it."""

    job_name: str
    relabel_configs: list[dict[str, Any]]
    discovered: list[tuple[str, dict[str, str]]]  # (model, discovered target)


def monitor_namespace(monitor: Mapping[str, Any], placement: str, pods: Sequence[tuple[str, str, Any, str]]) -> str:
    """Where a PodMonitor is applied: with its pods ("same-as-pods") or in a namespace of its own ("monitoring"),
    except that one without a namespaceSelector scrapes only its own namespace, so in "monitoring" it is applied
    with the pods of models that name no namespace (the overlay's)."""
    names = monitor["spec"].get("namespaceSelector", {}).get("matchNames")
    if placement == "monitoring":
        return "monitoring" if names else OVERLAY_NAMESPACE
    if names:
        return str(names[0])
    wanted = monitor["spec"]["selector"].get("matchLabels", {}).items()
    return next((ns for _, ns, pod, _ in pods if wanted <= pod["metadata"]["labels"].items()), OVERLAY_NAMESPACE)


def scrapes(spec: Spec, objects: Mapping[str, Any], placement: str) -> list[Scrape]:
    """Every generated PodMonitor endpoint applied as prometheus-operator would, beside every model's pod (in the
    namespace its selector names, or the overlay's)."""
    pods = []
    for model in spec.models:
        dep = objects[f"exporters/{k8s.deployment_name(spec, model)}-deployment.yaml"]
        namespace = model.selector.get("namespace", OVERLAY_NAMESPACE)
        pods.append((model.name, namespace, dep["spec"]["template"], f"{dep['metadata']['name']}-0"))
    out = []
    for monitor in (d for d in objects.values() if d["kind"] == "PodMonitor"):
        meta = {"namespace": monitor_namespace(monitor, placement, pods), **monitor["metadata"]}
        monitor = {**monitor, "metadata": meta}
        where = discovered_namespaces(monitor)
        for index, endpoint in enumerate(monitor["spec"]["podMetricsEndpoints"]):
            discovered = [
                (model, target)
                for model, namespace, pod, name in pods
                if where is None or namespace in where
                for target in pod_targets(pod, namespace, name)
            ]
            out.append(Scrape(f"podMonitor/{meta['namespace']}/{meta['name']}/{index}",
                              operator_relabel_configs(monitor, endpoint), discovered))  # fmt: skip
    return out


def scraped_targets(spec: Spec, objects: Mapping[str, Any], placement: str) -> dict[str, list[dict]]:
    """Per model, the labels of every target that scrapes its pod."""
    out: dict[str, list[dict]] = {model.name: [] for model in spec.models}
    for scrape in scrapes(spec, objects, placement):
        for model, discovered in scrape.discovered:
            labels = final_labels(scrape.job_name, discovered, scrape.relabel_configs)
            if labels is not None:
                out[model].append(labels)
    return out


# ==============================================================================================================
# Raw selectors of the generated rules
# ==============================================================================================================
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")\s*,?')
Matcher = tuple[str, str, str]


def _unquote(text: str) -> str:
    body = text[1:-1]
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


def selectors(expr: str) -> Iterator[tuple[str, list[Matcher]]]:
    """(metric name, matchers) of every vector selector with braces in a PromQL/MetricsQL expression."""
    position = 0
    while position < len(expr):
        string = _STRING.match(expr, position)
        if string:
            position = string.end()
            continue
        found = _SELECTOR.match(expr, position)
        if found and (position == 0 or not re.match(r"[a-zA-Z0-9_:]", expr[position - 1])):
            cursor, matchers = found.end(), []
            while (matcher := _MATCHER.match(expr, cursor)) is not None:
                matchers.append((matcher.group(1), matcher.group(2), _unquote(matcher.group(3))))
                cursor = matcher.end()
            closing = re.compile(r"\s*\}").match(expr, cursor)
            if closing is not None:  # a selector, not a WITH template body or a `by (...)` list
                name = found.group(1) or next((v for k, op, v in matchers if k == "__name__" and op == "="), "")
                yield name, matchers
                position = closing.end()
                continue
        position += 1


def raw_selectors(rule_file: Mapping[str, Any]) -> list[tuple[str, list[Matcher], str]]:
    """(metric, matchers, rule) of every selector over a series no rule of the file records (nor ALERTS)."""
    rules = [rule for group in rule_file["groups"] for rule in group["rules"]]
    recorded = {rule["record"] for rule in rules if "record" in rule} | {"ALERTS", "ALERTS_FOR_STATE"}
    out = []
    for rule in rules:
        for name, matchers in selectors(rule["expr"]):
            if name not in recorded:
                out.append((name, matchers, rule.get("record") or rule.get("alert", "")))
    return out


def _matches(op: str, pattern: str, value: str) -> bool:
    if op in ("=", "!="):
        return (value == pattern) == (op == "=")
    return bool(re.fullmatch(pattern, value, re.DOTALL)) == (op == "=~")


def model_labels(spec: Spec) -> set[str]:
    """The labels that name a model on the raw series the spec reads."""
    names = {spec.metrics.model_label}
    for request_class in spec.classes:
        for sli in request_class.slos:
            names.add(spec.histogram(request_class, sli).model_label)
    return {name for name in names if name is not None}


def check_rules_against_scrape(spec: Spec, objects: Mapping[str, Any], placement: str) -> list[str]:
    """Every raw selector's scope matchers against the scraped labels of the models it names (all models when it
    names none: then at least one model's targets must match). Returns the mismatches."""
    targets = scraped_targets(spec, objects, placement)
    problems = [f"{model}: scraped {len(found)} times, not once per port"
                for model, found in targets.items() if len(found) != 2]  # fmt: skip
    scope_labels = {label for model in spec.models for label in model.selector} | {
        label for found in targets.values() for labels in found for label in labels
    }
    naming = model_labels(spec)
    rule_file = rules_generator.files(spec)[rules_generator.rules_path(spec)]
    checked = 0
    for metric, matchers, rule in raw_selectors(rule_file):
        scope = [m for m in matchers if m[0] in scope_labels]
        named = [
            model.name
            for model in spec.models
            if any(label in naming and _matches(op, value, model.name) for label, op, value in matchers)
        ]
        candidates = named or [model.name for model in spec.models]

        def satisfied(model: str, scope: list[Matcher] = scope) -> bool:
            found = targets[model]
            return bool(found) and all(_matches(op, v, labels.get(k, "")) for labels in found for k, op, v in scope)

        ok = all(satisfied(m) for m in named) if named else any(satisfied(m) for m in candidates)
        if not ok:
            problems.append(f"{rule}: {metric}{{{matchers}}} matches no scraped series; scraped: {targets}")
        checked += 1
    assert checked > 0, "no raw selector found in the rules"
    return problems


# ==============================================================================================================
# Specs
# ==============================================================================================================
def _assistant_with(models: str) -> Spec:
    text = (ROOT / "examples" / "assistant.yaml").read_text(encoding="utf-8")
    start = text.index("models:\n")
    end = text.index("\n\n", start)
    return load_spec_text(text[:start] + models + text[end:], "assistant.yaml")


def other_namespace() -> Spec:
    """llama-3-8b runs in prod-eu; llama-3-70b in prod (the top-level selector), both job vllm."""
    return _assistant_with(
        "models:\n"
        "  - {name: llama-3-70b, gpu: h100-sxm, tensor_parallel: 8, max_num_seqs: 256}\n"
        "  - {name: llama-3-8b, gpu: h100-sxm, tensor_parallel: 1, max_num_seqs: 256, selector: {namespace: prod-eu}}"
    )


def two_jobs_one_namespace() -> Spec:
    return _assistant_with(
        "models:\n"
        "  - {name: llama-3-70b, gpu: h100-sxm, tensor_parallel: 8, max_num_seqs: 256}\n"
        "  - {name: llama-3-8b, gpu: h100-sxm, tensor_parallel: 1, max_num_seqs: 256,"
        " selector: {job: vllm-canary, team: 'cost$1'}}"
    )


def no_namespace() -> Spec:
    """A selector with a job but no namespace: pods and monitor in the overlay's namespace."""
    text = (ROOT / "examples" / "summarize.yaml").read_text(encoding="utf-8")
    return load_spec_text(text.replace("selector: {namespace: batch}", "selector: {job: batch-llm}"), "s.yaml")


SPECS: dict[str, Callable[[], Spec]] = {
    **{path.stem: (lambda p=path: load_spec(p)) for path in EXAMPLES},
    "other-namespace": other_namespace,
    "two-jobs-one-namespace": two_jobs_one_namespace,
    "no-namespace": no_namespace,
}


def exporters(spec: Spec) -> dict[str, Any]:
    return {p: yaml.safe_load(t) for p, t in generate_all([spec]).items() if p.startswith("exporters/")}


# ==============================================================================================================
# Tests
# ==============================================================================================================
@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("name", list(SPECS))
def test_every_raw_selector_of_the_rules_matches_what_the_podmonitors_scrape(name: str, placement: str) -> None:
    spec = SPECS[name]()
    problems = check_rules_against_scrape(spec, exporters(spec), placement)
    assert not problems, "\n".join(problems[:5])


def test_the_examples_pin_job_and_namespace_and_the_scrape_sets_both() -> None:
    spec = load_spec(ROOT / "examples" / "assistant.yaml")
    assert dict(spec.selector) == {"namespace": "prod", "job": "vllm"}
    targets = scraped_targets(spec, exporters(spec), "monitoring")
    for found in targets.values():
        assert {(labels["job"], labels["namespace"], labels["endpoint"]) for labels in found} == {
            ("vllm", "prod", "http"), ("vllm", "prod", "gpu-metrics")
        }  # fmt: skip


def test_a_model_in_another_namespace_gets_its_own_podmonitor_there() -> None:
    spec = other_namespace()
    objects = exporters(spec)
    monitors = {p: d for p, d in objects.items() if d["kind"] == "PodMonitor"}
    assert set(monitors) == {"exporters/assistant-prod-podmonitor.yaml", "exporters/assistant-prod-eu-podmonitor.yaml"}
    eu = monitors["exporters/assistant-prod-eu-podmonitor.yaml"]["spec"]
    assert eu["namespaceSelector"] == {"matchNames": ["prod-eu"]}
    assert eu["selector"]["matchExpressions"] == [
        {"key": "app.kubernetes.io/instance", "operator": "In", "values": ["assistant-llama-3-8b"]}
    ]
    targets = scraped_targets(spec, objects, "monitoring")
    assert {labels["namespace"] for labels in targets["llama-3-8b"]} == {"prod-eu"}
    assert {labels["namespace"] for labels in targets["llama-3-70b"]} == {"prod"}


def test_a_dollar_in_a_selector_value_reaches_the_series_unexpanded() -> None:
    spec = two_jobs_one_namespace()
    targets = scraped_targets(spec, exporters(spec), "monitoring")
    assert {(labels["job"], labels["team"]) for labels in targets["llama-3-8b"]} == {("vllm-canary", "cost$1")}
    assert {labels["job"] for labels in targets["llama-3-70b"]} == {"vllm"}


def test_the_check_fails_on_a_podmonitor_without_the_relabelling() -> None:
    """What the generated PodMonitor was before: no relabelings, no namespaceSelector."""
    spec = load_spec(ROOT / "examples" / "assistant.yaml")
    objects = exporters(spec)
    monitor = objects["exporters/assistant-podmonitor.yaml"]
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        endpoint.pop("relabelings")
    assert check_rules_against_scrape(spec, objects, "same-as-pods")  # job="prod/slokit-assistant"
    monitor["spec"].pop("namespaceSelector")
    assert check_rules_against_scrape(spec, objects, "monitoring")  # nothing in prod is scraped


@pytest.mark.parametrize(
    ("selector", "words"),
    [
        ("{namespace: prod, job: vllm, pod: vllm-0}", "prometheus-operator sets `pod` on each scrape target"),
        ("{namespace: prod, job: vllm, container: vllm}", "sets `container` on each scrape target"),
        ("{namespace: Prod_EU}", "is not a Kubernetes namespace name"),
    ],
)
def test_validate_and_generate_warn_about_a_label_the_scrape_cannot_set(
    selector: str, words: str, tmp_path: Path
) -> None:
    text = (ROOT / "examples" / "assistant.yaml").read_text(encoding="utf-8")
    text = text.replace("selector: {namespace: prod, job: vllm}", f"selector: {selector}")
    path = tmp_path / "assistant.yaml"
    path.write_text(text, encoding="utf-8")
    runner = CliRunner()
    for argv in (["validate", str(path)], ["generate", str(path), "-o", str(tmp_path / "out"), "--no-promtool"]):
        result = runner.invoke(app, argv)
        assert result.exit_code == 0, result.output
        assert words in result.stderr, (argv, result.stderr)
    assert not k8s.scrape_warnings(load_spec(ROOT / "examples" / "assistant.yaml"))


def test_a_custom_histogram_outside_the_scrape_is_named_in_a_warning() -> None:
    text = (ROOT / "tests" / "data" / "engines" / "custom-histogram.yaml").read_text(encoding="utf-8")
    assert not k8s.scrape_warnings(load_spec_text(text, "custom.yaml"))  # no selector: nothing to give the series
    spec = load_spec_text(text.replace("window: 28d\n", "window: 28d\nselector: {namespace: edge}\n"), "c.yaml")
    warnings = k8s.scrape_warnings(spec)
    assert any("gateway_first_token_latency_ms is not scraped by the generated PodMonitor" in w for w in warnings)
    assert any("(namespace=edge)" in w for w in warnings)


# ==============================================================================================================
# The relabelling emulation, against a real Prometheus
# ==============================================================================================================
@pytest.mark.prometheus
def test_real_prometheus_labels_the_targets_as_this_test_computes(
    prometheus_factory: Callable[..., LocalPrometheus],
) -> None:
    """The operator's scrape configs, with discovery replaced by static targets carrying the same __meta_ labels:
    Prometheus's own relabelling gives every kept target the labels `final_labels` computed, and drops the rest."""
    specs = [other_namespace(), two_jobs_one_namespace()]
    configs, expected = [], []
    for number, spec in enumerate(specs):
        for scrape in scrapes(spec, exporters(spec), "monitoring"):
            static = [{"targets": [t["__address__"]], "labels": {k: v for k, v in t.items() if k != "__address__"}}
                      for _, t in scrape.discovered]  # fmt: skip
            job = f"{number}-{scrape.job_name}"
            configs.append({"job_name": job, "scrape_interval": "1h", "static_configs": static,
                            "relabel_configs": scrape.relabel_configs})  # fmt: skip
            for _, discovered in scrape.discovered:
                labels = final_labels(job, discovered, scrape.relabel_configs)
                if labels is not None:
                    expected.append(labels)
    prometheus = prometheus_factory(scrape_configs=configs).start()
    deadline = time.monotonic() + 30
    pools = {config["job_name"] for config in configs}
    found: list[dict[str, str]] = []
    while time.monotonic() < deadline and len(found) < len(expected):
        found = [t["labels"] for t in prometheus.targets() if t["scrapePool"] in pools]
        time.sleep(0.5)
    key = lambda labels: sorted(labels.items())  # noqa: E731
    assert sorted(found, key=key) == sorted(expected, key=key)
    assert any(labels.get("team") == "cost$1" for labels in found)
    assert {labels["namespace"] for labels in found} == {"prod", "prod-eu"}
