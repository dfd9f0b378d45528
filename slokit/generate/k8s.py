"""The deployment side of a spec, as Kubernetes objects under `exporters/`.

Per service: the spec as a ConfigMap (for slokit's stat-logger plugin inside vLLM), a PodMonitor scraping both the
vLLM port and the GPU sidecar (one per distinct model `selector:`, giving the scraped series exactly the labels the
rules select on), and the prometheus-adapter rules that turn the recorded scale-out signal (and the predictive
policy's desired replicas, slokit/generate/autoscale.py) into external metrics. Per model: a Deployment (vLLM plus
the NVML sidecar), a Service, and two alternative autoscalers on the scale-out signal, an HPA on the external metric
and a KEDA ScaledObject with a Prometheus trigger. Apply one autoscaler per Deployment, never both: KEDA creates its
own HPA and the two would fight.

Only vLLM is deployed (`source: vllm` or `slokit`): for any other engine or gateway (SGLang, TGI, TensorRT-LLM,
Dynamo, llm-d) the pods are the user's, so there is no Deployment, Service or GPU sidecar; the PodMonitor scrapes
the source's own metrics port and path on pods labelled `app.kubernetes.io/part-of: <service>` and
`app.kubernetes.io/component: <the source's component>`, and the autoscalers say which Deployment to aim at. A
source whose series are pushed over OTLP (`otel-genai`) gets no PodMonitor.

Everything site-specific (images, namespace, Prometheus address, model storage, replica bounds) gets a plain
default that kustomize overlays replace; docs/kubernetes.md says which field is which.

How the sidecar sees the vLLM container's GPUs: GPUs are allocated per container, so a sidecar that requests none
sees none. The vLLM container writes the UUIDs it was given (`nvidia-smi --query-gpu=uuid`) to a shared in-memory
volume before starting vLLM; the sidecar runs with `NVIDIA_VISIBLE_DEVICES=all` (NVML only, `utility` capability)
and watches exactly the UUIDs in that file (`--gpus-file`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath
from types import MappingProxyType
from typing import Any, Final

from slokit import __version__, promql, schema
from slokit.generate.writer import to_yaml
from slokit.spec import Model, Spec

VLLM_PORT: Final = 8000
VLLM_PORT_NAME: Final = "http"
GPU_PORT_NAME: Final = "gpu-metrics"
SCRAPE_INTERVAL: Final = "15s"
GPU_POLL_INTERVAL: Final = "1s"
RUN_DIR: Final = "/var/run/slokit"
GPU_FILE: Final = f"{RUN_DIR}/gpus"
WEB_CONFIG_DIR: Final = "/etc/slokit/web"  # the web-config Secret, mounted read-only into the sidecar
WEB_CONFIG_FILE: Final = f"{WEB_CONFIG_DIR}/web-config.yml"
WEB_CONFIG_VOLUME: Final = "slokit-web-config"
SPEC_DIR: Final = "/etc/slokit"
MODELS_DIR: Final = "/models"
# Placeholders a kustomize `images:` entry replaces (docs/kubernetes.md shows the two-line Dockerfiles).
SLOKIT_IMAGE: Final = f"registry.example.com/slokit/slokit:{__version__}"
PROMETHEUS_URL: Final = "http://prometheus-operated.monitoring.svc:9090"  # prometheus-operator's default service
MIN_REPLICAS: Final = 1
MAX_REPLICAS: Final = 8
EXTERNAL_METRIC: Final = schema.EXTERNAL_SCALE_OUT_METRIC
DOMAIN: Final = "slokit.dev"

_DNS_BAD = re.compile(r"[^a-z0-9-]+")
_NAMESPACE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # DNS-1123 label, at most 63 characters

# How prometheus-operator labels a PodMonitor target (pkg/prometheus/promcfg.go, generatePodMonitorConfig), before
# the endpoint's own `relabelings`: `namespace` from the pod's namespace, `container` and `pod` from the pod,
# `job` = `<PodMonitor namespace>/<PodMonitor name>` (or the pod label `jobLabel` names), `endpoint` = the port
# name; Prometheus adds `instance` (the target address). The endpoint's relabelings then run in order.
NAMESPACE_LABEL: Final = "namespace"
# Set per pod or per port: no PodMonitor can give every series of a model one value for these.
PER_TARGET_LABELS: Final = ("instance", "pod", "container", "endpoint")


def object_name(*parts: str, limit: int = 63) -> str:
    """A DNS-1035 name (lower case, digits, '-', starting with a letter, at most `limit` characters) from `parts`.

    Model names are free text (`meta-llama/Llama-3-70B`); when cleaning changes a part, a short hash of the
    original keeps two different names from colliding.
    """
    raw = "-".join(parts)
    clean = _DNS_BAD.sub("-", raw.lower()).strip("-")
    clean = re.sub(r"-{2,}", "-", clean)
    if not clean or not clean[0].isalpha():
        clean = f"m-{clean}".rstrip("-")
    if clean != raw or len(clean) > limit:
        suffix = hashlib.sha256(raw.encode()).hexdigest()[:6]
        clean = f"{clean[: limit - len(suffix) - 1].rstrip('-')}-{suffix}"
    return clean


def quantity(value: float) -> str:
    """A Kubernetes quantity for a ratio, exact to the thousandth (0.8 -> "800m", 1 -> "1")."""
    milli = round(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _labels(spec: Spec, component: str, model: Model | None = None) -> dict[str, str]:
    labels = {
        "app.kubernetes.io/name": "vllm" if component == "server" else "slokit",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": object_name(spec.service),
        "app.kubernetes.io/managed-by": "slokit",
    }
    if model is not None:
        labels["app.kubernetes.io/instance"] = deployment_name(spec, model)
    return labels


def _pod_selector(spec: Spec, model: Model) -> dict[str, str]:
    return {
        "app.kubernetes.io/part-of": object_name(spec.service),
        "app.kubernetes.io/instance": deployment_name(spec, model),
    }


def deployment_name(spec: Spec, model: Model) -> str:
    """The Deployment (and Service, HPA, ScaledObject) name for one model of the service."""
    return object_name(spec.service, model.name)


def configmap_name(spec: Spec) -> str:
    """The ConfigMap holding the spec file."""
    return object_name(spec.service, "slokit-spec")


def spec_file_name(spec: Spec) -> str:
    """The key of the spec in the ConfigMap (the spec's own file name)."""
    name = PurePath(spec.path).name if spec.path and not spec.path.startswith("<") else f"{spec.service}.yaml"
    return re.sub(r"[^A-Za-z0-9._-]", "-", name)


def scale_out_query(spec: Spec, model: Model) -> str:
    """The scale-out signal for one model: the worst class's p99 TTFT over its threshold (1 = at the SLO)."""
    labels = f'{schema.RULE_LABEL_SERVICE}="{spec.service}",{schema.RULE_LABEL_MODEL}="{_promql_string(model.name)}"'
    return f"max({schema.RECORD_SCALE_OUT}{{{labels}}})"


def _promql_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


# ==============================================================================================================
# Per service
# ==============================================================================================================
def configmap(spec: Spec) -> dict[str, Any]:
    """The spec as written, mounted into the vLLM container for slokit's stat-logger plugin."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": configmap_name(spec), "labels": _labels(spec, "spec")},
        "data": {spec_file_name(spec): spec.text or f"# spec text unavailable; load {spec.path} instead\n"},
    }


@dataclass(frozen=True)
class ScrapeGroup:
    """Models that share one effective `selector:`, scraped by one PodMonitor that gives their series exactly the
    labels of that selector."""

    name: str  # the PodMonitor's name
    file: str  # its file under exporters/
    selector: Mapping[str, str]
    models: tuple[Model, ...]

    @property
    def namespace(self) -> str | None:
        """The namespace the selector puts these models in (their pods must run there), if it names one."""
        return self.selector.get(NAMESPACE_LABEL)


def scrape_groups(spec: Spec) -> list[ScrapeGroup]:
    """One group per distinct effective model selector, in the order of `models:`.

    One group (every example): `slokit-<service>` in `<service>-podmonitor.yaml`. Several: the group's namespace,
    or its position when namespaces do not tell the groups apart, is added to both names.
    """
    grouped: dict[tuple[tuple[str, str], ...], list[Model]] = {}
    for model in spec.models:
        grouped.setdefault(tuple(sorted(model.selector.items())), []).append(model)
    if not grouped:
        grouped[tuple(sorted(spec.selector.items()))] = []
    keys = list(grouped)
    namespaces = [dict(key).get(NAMESPACE_LABEL) for key in keys]
    if len(keys) == 1:
        suffixes: list[tuple[str, ...]] = [()]
    elif None not in namespaces and len(set(namespaces)) == len(keys):
        suffixes = [(str(ns),) for ns in namespaces]
    else:
        suffixes = [(str(index),) for index in range(1, len(keys) + 1)]
    return [
        ScrapeGroup(
            name=object_name("slokit", spec.service, *suffix),
            file=f"exporters/{object_name(spec.service, *suffix)}-podmonitor.yaml",
            selector=MappingProxyType(dict(key)),
            models=tuple(grouped[key]),
        )
        for key, suffix in zip(keys, suffixes, strict=True)
    ]


def scrape_relabelings(selector: Mapping[str, str]) -> list[dict[str, Any]]:
    """Endpoint relabelings that give every scraped series the selector's labels.

    They run after prometheus-operator's own, so `job` (and any other label but the per-target ones) becomes the
    selector's value whatever the operator set. `namespace` is left to the operator: it is the pod's namespace, and
    the PodMonitor's `namespaceSelector` scrapes only that one. `$` is doubled: Prometheus expands `$1`, `${name}`
    in a replacement and reads `$$` as one `$`.
    """
    return [
        {"action": "replace", "targetLabel": label, "replacement": value.replace("$", "$$")}
        for label, value in sorted(selector.items())
        if label != NAMESPACE_LABEL and label not in PER_TARGET_LABELS
    ]


def pod_monitor(spec: Spec, group: ScrapeGroup | None = None) -> dict[str, Any]:
    """A PodMonitor for both ports of a group of models' pods: vLLM's /metrics and the GPU sidecar's (for an engine
    slokit does not deploy, the source's metrics port and path on the pods labelled with its component).

    A PodMonitor rather than a ServiceMonitor: the sidecar port needs no Service, and a ServiceMonitor would add
    a `service` target label that collides with the `service` label slokit's rules write. prometheus-operator would
    label the series `job="<namespace>/<name>"`: the relabelings set the selector's `job` (and its other labels)
    instead, and `namespaceSelector` scrapes the namespace the selector names (without one, the PodMonitor's own).
    With several groups, each selects only its own models' pods.
    """
    groups = scrape_groups(spec)
    chosen = group or groups[0]

    def endpoint(port: str) -> dict[str, Any]:
        out: dict[str, Any] = {"port": port, "path": "/metrics", "interval": SCRAPE_INTERVAL, "scrapeTimeout": "10s"}
        relabelings = scrape_relabelings(chosen.selector)
        if relabelings:
            out["relabelings"] = relabelings
        return out

    source = spec.source
    selector: dict[str, Any] = {
        "matchLabels": {
            "app.kubernetes.io/part-of": object_name(spec.service),
            "app.kubernetes.io/component": "server" if source.deploys_engine else source.pod_component,
        }
    }
    if len(groups) > 1:
        selector["matchExpressions"] = [
            {
                "key": "app.kubernetes.io/instance",
                "operator": "In",
                "values": [deployment_name(spec, model) for model in chosen.models],
            }
        ]
    body: dict[str, Any] = {"selector": selector}
    if chosen.namespace is not None:
        body["namespaceSelector"] = {"matchNames": [chosen.namespace]}
    if source.deploys_engine:
        body["podMetricsEndpoints"] = [
            endpoint(VLLM_PORT_NAME),
            {**endpoint(GPU_PORT_NAME), **gpu_scrape_settings(spec)},
        ]
    else:  # the user's pods: the source's metrics port only (no GPU sidecar runs there)
        body["podMetricsEndpoints"] = [{**endpoint(source.metrics_port), "path": source.metrics_path}]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": chosen.name, "labels": _labels(spec, "monitoring")},
        "spec": body,
    }


def scrape_warnings(spec: Spec) -> list[str]:
    """Selector labels the generated PodMonitors cannot give the series the rules read: `validate` and `generate`
    print these, since every rule that reads such a series would read nothing."""
    out: list[str] = []
    for group in scrape_groups(spec):
        models = ", ".join(m.name for m in group.models) or "every model"
        for label in PER_TARGET_LABELS:
            if label in group.selector:
                out.append(
                    f"selector {label}: {group.selector[label]!r} (models {models}): prometheus-operator sets "
                    f"`{label}` on each scrape target itself, so no PodMonitor can give every series of these "
                    f"models that value and the rules read at most one target's series; leave `{label}` out of "
                    "`selector:` (replicas are told apart by alerting.replica_labels)"
                )
        namespace = group.namespace
        if namespace is not None and (len(namespace) > 63 or not _NAMESPACE_NAME.match(namespace)):
            out.append(
                f"selector namespace: {namespace!r} (models {models}) is not a Kubernetes namespace name "
                "(lower-case letters, digits and '-', at most 63): no pod runs there, so the PodMonitor scrapes "
                "nothing the rules read"
            )
    scoped = any(model.selector for model in spec.models) or bool(spec.selector)
    for request_class in spec.classes:
        for sli, slo in request_class.slos.items():
            if slo.metric is not None and scoped:
                scopes = {tuple(sorted(spec.model(name).selector.items())) for name in request_class.models}
                labels = " or ".join(sorted(", ".join(f"{k}={v}" for k, v in scope) for scope in scopes))
                out.append(
                    f"classes {request_class.name}: {sli.value}: metric {slo.metric.name} is not scraped by the "
                    f"generated PodMonitor (it scrapes vLLM and the GPU sidecar): the scrape that collects it must "
                    f"give its series the selector's labels ({labels}), or the rules read none of them"
                )
    return out


def gpu_scrape_settings(spec: Spec) -> dict[str, Any]:
    """The PodMonitor endpoint settings that match the sidecar's web-config (nothing for plain HTTP).

    Secrets are read by prometheus-operator from the PodMonitor's namespace: the web-config Secret's `ca.crt`
    verifies the sidecar, the client Secret's `tls.crt`/`tls.key` identify Prometheus, and `username`/`password`
    are sent as basic auth. The server name is checked, never skipped (no insecureSkipVerify).
    """
    settings = spec.gpu_exporter
    if settings.web_config_secret is None:
        return {}
    out: dict[str, Any] = {"scheme": settings.scheme}
    if settings.tls:
        tls: dict[str, Any] = {
            "ca": {"secret": {"name": settings.web_config_secret, "key": "ca.crt"}},
            "serverName": settings.server_name,
        }
        if settings.client_cert_secret is not None:
            tls["cert"] = {"secret": {"name": settings.client_cert_secret, "key": "tls.crt"}}
            tls["keySecret"] = {"name": settings.client_cert_secret, "key": "tls.key"}
        out["tlsConfig"] = tls
    if settings.basic_auth_secret is not None:
        out["basicAuth"] = {
            "username": {"name": settings.basic_auth_secret, "key": "username"},
            "password": {"name": settings.basic_auth_secret, "key": "password"},
        }
    return out


def adapter_rules() -> dict[str, Any]:
    """prometheus-adapter `externalRules` exposing `slokit:scale_out:ratio` (the reactive HPA's metric) and
    `slokit:autoscale_replicas:desired` (the predictive HPA's) as external metrics.

    Not namespaced: the recorded series are aggregated per service and model (and class), so they have no namespace
    label. `max` collapses the classes into one value (the HPA would otherwise add them up).
    """
    exposed = (
        (schema.RECORD_SCALE_OUT, EXTERNAL_METRIC),
        (schema.RECORD_AUTOSCALE_DESIRED, schema.EXTERNAL_AUTOSCALE_DESIRED_METRIC),
    )
    return {
        "externalRules": [
            {
                "seriesQuery": f'{{__name__="{record}",{schema.RULE_LABEL_SERVICE}!=""}}',
                "resources": {"namespaced": False},
                "name": {"matches": f"^{promql.regex_escape(record)}$", "as": metric},
                "metricsQuery": "max(<<.Series>>{<<.LabelMatchers>>})",
            }
            for record, metric in exposed
        ]
    }


def adapter_path(spec: Spec) -> str:
    """`exporters/<service>-prometheus-adapter.yaml`: written by `files` for the reactive HPA, or by the predictive
    signal's generator where no model has a reactive signal."""
    return f"exporters/{object_name(spec.service)}-prometheus-adapter.yaml"


def adapter_configmap(spec: Spec) -> dict[str, Any]:
    """The adapter rules as a ConfigMap; they are the same for every slokit service, so install them once."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": object_name(spec.service, "prometheus-adapter-rules"),
            "labels": _labels(spec, "autoscaling"),
            "annotations": {
                f"{DOMAIN}/note": "Merge externalRules into your prometheus-adapter config (Helm value "
                "rules.external); the rules serve every slokit service."
            },
        },
        "data": {"config.yaml": _yaml(adapter_rules())},
    }


def _yaml(data: Any) -> str:
    return to_yaml(data)


# ==============================================================================================================
# Per model
# ==============================================================================================================
def _vllm_image(spec: Spec) -> str:
    tag = f"v{spec.vllm.version}.0"
    if not spec.source.needs_plugin:
        return f"vllm/vllm-openai:{tag}"  # the engine's own metrics: the stock image is enough
    return f"registry.example.com/slokit/vllm-openai:{tag}-slokit{__version__}"


def _vllm_args(spec: Spec, model: Model) -> list[str]:
    args = [
        f"{MODELS_DIR}/{object_name(model.name)}",
        "--served-model-name",
        model.name,
        "--tensor-parallel-size",
        str(model.tensor_parallel),
        "--max-num-seqs",
        str(model.max_num_seqs),
        "--port",
        str(VLLM_PORT),
    ]
    return args + spec.source.engine_args(spec)


# Written by the vLLM container before vLLM starts: the UUIDs of the GPUs this container was given. nvidia-smi
# is mounted into every GPU container by the NVIDIA container toolkit (utility capability).
_ENTRY: Final = (
    f"nvidia-smi --query-gpu=uuid --format=csv,noheader > {GPU_FILE}.tmp && mv {GPU_FILE}.tmp {GPU_FILE} || "
    'echo "slokit: nvidia-smi could not list this container\'s GPUs; the gpu-exporter sidecar will watch none" >&2\n'
    'exec vllm serve "$@"\n'
)


def _vllm_container(spec: Spec, model: Model) -> dict[str, Any]:
    mounts = [
        {"name": "slokit-run", "mountPath": RUN_DIR},
        {"name": "models", "mountPath": MODELS_DIR, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    env: list[dict[str, Any]] = []
    if spec.source.needs_plugin:
        mounts.insert(0, {"name": "slokit-spec", "mountPath": SPEC_DIR, "readOnly": True})
        env.append({"name": "SLOKIT_SPEC", "value": f"{SPEC_DIR}/{spec_file_name(spec)}"})
    env.append({"name": "VLLM_NO_USAGE_STATS", "value": "1"})
    health = {"httpGet": {"path": "/health", "port": VLLM_PORT_NAME}}
    gpus = str(model.tensor_parallel)
    return {
        "name": "vllm",
        "image": _vllm_image(spec),
        "command": ["/bin/sh", "-c", _ENTRY, "vllm"],
        "args": _vllm_args(spec, model),
        "env": env,
        "ports": [{"name": VLLM_PORT_NAME, "containerPort": VLLM_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"nvidia.com/gpu": gpus}, "limits": {"nvidia.com/gpu": gpus}},
        "volumeMounts": mounts,
        # Loading a 70B model takes minutes: the startup probe allows 30 before liveness applies.
        "startupProbe": {**health, "periodSeconds": 10, "failureThreshold": 180},
        "readinessProbe": {**health, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**health, "periodSeconds": 10, "failureThreshold": 6},
    }


def _gpu_container(spec: Spec) -> dict[str, Any]:
    settings = spec.gpu_exporter
    web_args: list[str] = []
    mounts: list[dict[str, Any]] = [{"name": "slokit-run", "mountPath": RUN_DIR, "readOnly": True}]
    if settings.web_config_secret is not None:
        web_args = ["--web.config.file", WEB_CONFIG_FILE]
        mounts.append({"name": WEB_CONFIG_VOLUME, "mountPath": WEB_CONFIG_DIR, "readOnly": True})
    # /healthz fails only when a poll is stuck inside the driver: a restart is the right cure then. It needs no
    # password; the kubelet cannot present a client certificate, so with one required the probe checks the socket.
    liveness: dict[str, Any] = {"httpGet": {"path": "/healthz", "port": GPU_PORT_NAME}}
    if settings.tls:
        liveness["httpGet"]["scheme"] = "HTTPS"
    if settings.client_cert_secret is not None:
        liveness = {"tcpSocket": {"port": GPU_PORT_NAME}}
    return {
        "name": "gpu-exporter",
        "image": SLOKIT_IMAGE,
        "args": [
            "exporter",
            "gpu",
            "--port",
            str(schema.GPU_EXPORTER_PORT),
            "--interval",
            GPU_POLL_INTERVAL,
            "--gpus-file",
            GPU_FILE,
            # The pod IP, not 0.0.0.0: Prometheus and the kubelet reach it, other pods' loopback does not.
            "--address",
            "$(POD_IP)",
            *web_args,
        ],
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            # NVML access without a GPU request: the container toolkit mounts the driver library and device nodes;
            # --gpus-file then limits polling to the vLLM container's GPUs (docs/gpu-exporter.md).
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
        ],
        "ports": [{"name": GPU_PORT_NAME, "containerPort": schema.GPU_EXPORTER_PORT, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": "20m", "memory": "96Mi"},  # about 66 MB resident, measured
            "limits": {"memory": "256Mi"},
        },
        "volumeMounts": mounts,
        "livenessProbe": {
            **liveness,
            "initialDelaySeconds": 10,
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def deployment(spec: Spec, model: Model) -> dict[str, Any]:
    """vLLM serving one model, with the GPU sidecar beside it."""
    volumes: list[dict[str, Any]] = [
        {"name": "slokit-run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        {"name": "models", "persistentVolumeClaim": {"claimName": object_name(spec.service, "models")}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},  # NCCL between TP ranks
    ]
    if spec.source.needs_plugin:
        volumes.insert(0, {"name": "slokit-spec", "configMap": {"name": configmap_name(spec)}})
    if spec.gpu_exporter.web_config_secret is not None:
        # 0444: the sidecar runs as user 65534 and Secret files belong to root; nothing else runs in that container.
        secret = {"secretName": spec.gpu_exporter.web_config_secret, "defaultMode": 0o444}
        volumes.append({"name": WEB_CONFIG_VOLUME, "secret": secret})
    selector = _pod_selector(spec, model)
    labels = {**_labels(spec, "server", model), **selector}
    annotations = {f"{DOMAIN}/model": model.name}
    if spec.digest:
        annotations[f"{DOMAIN}/spec-digest"] = spec.digest  # a changed spec rolls the pods
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment_name(spec, model), "labels": labels, "annotations": {**annotations}},
        "spec": {
            "replicas": MIN_REPLICAS,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {
                    "containers": [_vllm_container(spec, model), _gpu_container(spec)],
                    "volumes": volumes,
                    "terminationGracePeriodSeconds": 60,
                },
            },
        },
    }


def service(spec: Spec, model: Model) -> dict[str, Any]:
    """The OpenAI-compatible API of one model's pods."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": deployment_name(spec, model), "labels": _labels(spec, "server", model)},
        "spec": {
            "selector": _pod_selector(spec, model),
            "ports": [{"name": VLLM_PORT_NAME, "port": VLLM_PORT, "targetPort": VLLM_PORT_NAME, "protocol": "TCP"}],
        },
    }


def _behavior(spec: Spec) -> dict[str, Any]:
    """Scale up only after the signal held for `scale_out.for` (the HPA keeps the lowest recommendation over the
    window), at most doubling per 5 minutes; scale down slowly, one replica per 5 minutes after 15 quiet minutes,
    since an LLM replica takes minutes to come back."""
    hold = min(3600, int(spec.alerting.scale_out.for_))
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": hold,
            "selectPolicy": "Max",
            "policies": [{"type": "Percent", "value": 100, "periodSeconds": 300}],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": max(900, hold),
            "selectPolicy": "Min",
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}],
        },
    }


_ONE_OF: Final = (
    "Apply this or the {other} for the same Deployment, not both: KEDA creates its own HPA and the two would fight."
)


def target_note(spec: Spec) -> str:
    """For an engine slokit does not deploy, which Deployment an autoscaler's `scaleTargetRef` must name (a
    sentence with a leading space; empty otherwise)."""
    source = spec.source
    if source.deploys_engine:
        return ""
    return f" Set scaleTargetRef.name to {source.scale_target}: slokit does not deploy {source.short}."


def scale_note(spec: Spec, other: str) -> str:
    """The autoscaler's note: one autoscaler per Deployment, and which one to aim at where slokit deploys none."""
    return _ONE_OF.format(other=other) + target_note(spec)


def scale_target(spec: Spec, model: Model) -> dict[str, str]:
    """The model's Deployment, as every autoscaler's `scaleTargetRef` names it."""
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment_name(spec, model)}


def autoscaler_labels(spec: Spec, model: Model) -> dict[str, str]:
    """The labels of every autoscaler of a model (reactive or predictive, HPA or ScaledObject)."""
    return _labels(spec, "autoscaling", model)


def external_metric(spec: Spec, model: Model, name: str, target: dict[str, str]) -> dict[str, Any]:
    """An HPA metric reading prometheus-adapter's external metric `name` for one model of the service."""
    matched = {schema.RULE_LABEL_SERVICE: spec.service, schema.RULE_LABEL_MODEL: model.name}
    return {
        "type": "External",
        "external": {"metric": {"name": name, "selector": {"matchLabels": matched}}, "target": target},
    }


def hpa(spec: Spec, model: Model) -> dict[str, Any]:
    """An autoscaling/v2 HPA on the external scale-out metric (needs prometheus-adapter with `adapter_rules`)."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": deployment_name(spec, model),
            "labels": autoscaler_labels(spec, model),
            "annotations": {f"{DOMAIN}/note": scale_note(spec, "KEDA ScaledObject")},
        },
        "spec": {
            "scaleTargetRef": scale_target(spec, model),
            "minReplicas": MIN_REPLICAS,
            "maxReplicas": MAX_REPLICAS,
            "metrics": [
                external_metric(
                    spec,
                    model,
                    EXTERNAL_METRIC,
                    {"type": "Value", "value": quantity(spec.alerting.scale_out.fraction_of_slo)},
                )
            ],
            "behavior": _behavior(spec),
        },
    }


def scaled_object(spec: Spec, model: Model) -> dict[str, Any]:
    """A KEDA ScaledObject reading the same signal straight from Prometheus (no adapter needed)."""
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {
            "name": deployment_name(spec, model),
            "labels": autoscaler_labels(spec, model),
            "annotations": {f"{DOMAIN}/note": scale_note(spec, "HorizontalPodAutoscaler")},
        },
        "spec": {
            "scaleTargetRef": scale_target(spec, model),
            "minReplicaCount": MIN_REPLICAS,
            "maxReplicaCount": MAX_REPLICAS,
            "pollingInterval": 30,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(spec)}},
            "triggers": [
                {
                    "type": "prometheus",
                    "metricType": "Value",
                    "metadata": {
                        "serverAddress": PROMETHEUS_URL,
                        "query": scale_out_query(spec, model),
                        "threshold": f"{spec.alerting.scale_out.fraction_of_slo:g}",
                        "ignoreNullValues": "true",
                    },
                }
            ],
        },
    }


def has_scale_out_signal(spec: Spec, model: Model) -> bool:
    """Whether the rules record the scale-out signal for a model: some class on it has a TTFT objective."""
    return spec.has_scale_out_signal(model.name)


def files(spec: Spec) -> dict[str, Any]:
    """Every Kubernetes object for one spec: `exporters/<service>-<kind>.yaml` (a PodMonitor per distinct model
    selector, `scrape_groups`) and per model `exporters/<service>-<model>-<kind>.yaml`.

    A model none of whose classes has a TTFT objective gets no autoscaler: the rules record no scale-out signal
    for it, and an HPA on a missing external metric would only report errors. For an engine slokit does not
    deploy (every source but vLLM's and slokit's exporter), no Deployment or Service: the PodMonitor and the
    autoscalers are written for the user's own pods, and a source whose series are pushed (OTLP) gets no
    PodMonitor.
    """
    base = f"exporters/{object_name(spec.service)}"
    out: dict[str, Any] = {}
    source = spec.source
    if source.needs_plugin:
        out[f"{base}-configmap.yaml"] = configmap(spec)
    if source.scraped:
        for group in scrape_groups(spec):
            out[group.file] = pod_monitor(spec, group)
    scaled = [model for model in spec.models if has_scale_out_signal(spec, model)]
    if scaled:
        out[adapter_path(spec)] = adapter_configmap(spec)
    for model in spec.models:
        prefix = f"exporters/{deployment_name(spec, model)}"
        if source.deploys_engine:
            out[f"{prefix}-deployment.yaml"] = deployment(spec, model)
            out[f"{prefix}-service.yaml"] = service(spec, model)
        if model in scaled:
            out[f"{prefix}-hpa.yaml"] = hpa(spec, model)
            out[f"{prefix}-keda.yaml"] = scaled_object(spec, model)
    return out
