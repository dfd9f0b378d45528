"""The `gpu_exporter:` spec option: the generated Deployment and PodMonitor protect and scrape the sidecar over TLS
with basic auth, the objects pass the strict schemas, and a real Prometheus scrapes a real sidecar with them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from typer.main import get_command

from slokit import schema as S
from slokit.cli import app
from slokit.exporters.gpu.poller import GpuPoller
from slokit.exporters.gpu.server import GpuServer
from slokit.exporters.webconfig import hash_password, load_web_config
from slokit.generate import generate_all, k8s
from slokit.local.procs import LOOPBACK
from slokit.local.prometheus import LocalPrometheus
from slokit.spec import Spec, SpecError, load_spec_text
from tests.test_k8s import CRD_FILES, KUBERNETES_VERSIONS, strict_crd_schema, validate_custom
from tests.test_nvml_fake import FakeGpu, FakeNvml
from tests.tls_certs import Pki, make_pki

ROOT = Path(__file__).resolve().parent.parent
BASE = (ROOT / "examples" / "assistant.yaml").read_text()
SETTINGS = """
gpu_exporter:
  web_config_secret: slokit-gpu-web
  server_name: slokit-gpu-exporter
  client_cert_secret: prometheus-gpu-scrape
  basic_auth_secret: slokit-gpu-basic-auth
"""
A = "GPU-8e2f3c1a-0000-4000-8000-000000000001"


def tls_spec(settings: str = SETTINGS) -> Spec:
    return load_spec_text(BASE + settings, "tls.yaml")


def objects(spec: Spec) -> dict[str, Any]:
    return {p: yaml.safe_load(t) for p, t in generate_all([spec]).items() if p.startswith("exporters/")}


def sidecar(objs: dict[str, Any]) -> dict[str, Any]:
    dep = next(d for d in objs.values() if d["kind"] == "Deployment")
    (container,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "gpu-exporter"]
    return container


def gpu_endpoint(objs: dict[str, Any]) -> dict[str, Any]:
    monitor = next(d for d in objs.values() if d["kind"] == "PodMonitor")
    (endpoint,) = [e for e in monitor["spec"]["podMetricsEndpoints"] if e["port"] == k8s.GPU_PORT_NAME]
    return endpoint


def test_the_spec_option_is_checked_with_locations() -> None:
    cases = [
        ("gpu_exporter:\n  web_config_secret: Not_A_Name\n", "web_config_secret", "Kubernetes name"),
        ("gpu_exporter:\n  web_config_secret: a\n  scheme: ftp\n", "scheme", "not a scheme"),
        ("gpu_exporter:\n  basic_auth_secret: a\n", "gpu_exporter", "web_config_secret"),
        ("gpu_exporter:\n  web_config_secret: a\n  scheme: http\n  client_cert_secret: b\n", "client_cert_secret",
         "needs scheme: https"),
        ("gpu_exporter:\n  web_config_secrets: a\n", "web_config_secrets", "did you mean 'web_config_secret'"),
        ("gpu_exporter: yes\n", "gpu_exporter", "must be a mapping"),
    ]  # fmt: skip
    for text, field, message in cases:
        with pytest.raises(SpecError) as caught:
            tls_spec(text)
        (issue,) = caught.value.issues
        assert field in issue.field and message in issue.message, (text, issue)
        assert issue.location.line > BASE.count("\n"), issue  # points into the appended block


def test_plain_specs_keep_plain_http() -> None:
    objs = objects(load_spec_text(BASE, "plain.yaml"))
    assert "scheme" not in gpu_endpoint(objs) and "tlsConfig" not in gpu_endpoint(objs)
    assert "--web.config.file" not in sidecar(objs)["args"]
    assert sidecar(objs)["args"][-2:] == ["--address", "$(POD_IP)"]


def test_generated_tls_objects_pass_the_strict_schemas_and_line_up() -> None:
    objs = objects(tls_spec())
    for version in KUBERNETES_VERSIONS:
        for data in objs.values():
            if data["kind"] in {"Deployment", "Service", "ConfigMap", "HorizontalPodAutoscaler"}:
                kubernetes_validate.validate(data, version, strict=True)
    for path, data in objs.items():
        if data["kind"] == "PodMonitor":
            assert validate_custom(data) == [], path
    crds = Path("/work/shared/schemas/crds")
    monitor = next(d for d in objs.values() if d["kind"] == "PodMonitor")
    import tests.test_k8s as t

    if (crds / CRD_FILES["PodMonitor"]).exists():
        strict_crd_schema.cache_clear()
        old = t.CRD_DIR
        t.CRD_DIR = crds
        try:
            errors = list(jsonschema.Draft7Validator(strict_crd_schema("PodMonitor", "v1")).iter_errors(monitor))
        finally:
            t.CRD_DIR = old
            strict_crd_schema.cache_clear()
        assert not errors, errors[0].message
    container = sidecar(objs)
    args = container["args"]
    assert args[args.index("--web.config.file") + 1] == k8s.WEB_CONFIG_FILE
    assert {"name": k8s.WEB_CONFIG_VOLUME, "mountPath": k8s.WEB_CONFIG_DIR, "readOnly": True} in container[
        "volumeMounts"
    ]
    dep = next(d for d in objs.values() if d["kind"] == "Deployment")
    volume = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == k8s.WEB_CONFIG_VOLUME)
    assert volume["secret"]["secretName"] == "slokit-gpu-web"
    assert container["livenessProbe"]["tcpSocket"] == {"port": k8s.GPU_PORT_NAME}  # kubelet has no client cert
    endpoint = gpu_endpoint(objs)
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["serverName"] == "slokit-gpu-exporter"
    assert "insecureSkipVerify" not in endpoint["tlsConfig"]
    assert endpoint["basicAuth"]["password"] == {"name": "slokit-gpu-basic-auth", "key": "password"}
    # The real CLI accepts the sidecar's arguments, web-config flag included.
    root = get_command(app)
    ctx = root.make_context("slokit", list(args[:2]), resilient_parsing=True)
    sub = root.get_command(ctx, "exporter").get_command(ctx, "gpu")  # type: ignore[attr-defined]
    parsed = sub.make_context("gpu", list(args[2:]))
    assert str(parsed.params["web_config_file"]) == k8s.WEB_CONFIG_FILE


def test_without_a_client_cert_the_liveness_probe_uses_https() -> None:
    objs = objects(tls_spec("gpu_exporter:\n  web_config_secret: slokit-gpu-web\n  basic_auth_secret: s\n"))
    assert sidecar(objs)["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "gpu-metrics", "scheme": "HTTPS"}
    assert "cert" not in gpu_endpoint(objs)["tlsConfig"]


def scrape_config(job: str, endpoint: dict[str, Any], target: str, secrets: dict[str, dict[str, Path]]) -> dict:
    """What prometheus-operator makes of a PodMonitor endpoint, with the Secrets as files (as it mounts them)."""
    config: dict[str, Any] = {
        "job_name": job,
        "metrics_path": endpoint["path"],
        "scheme": endpoint.get("scheme", "http"),
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "static_configs": [{"targets": [target]}],
    }
    tls = endpoint.get("tlsConfig")
    if tls:
        tls_config: dict[str, Any] = {"server_name": tls["serverName"]}
        tls_config["ca_file"] = str(secrets[tls["ca"]["secret"]["name"]][tls["ca"]["secret"]["key"]])
        if "cert" in tls:
            tls_config["cert_file"] = str(secrets[tls["cert"]["secret"]["name"]][tls["cert"]["secret"]["key"]])
            tls_config["key_file"] = str(secrets[tls["keySecret"]["name"]][tls["keySecret"]["key"]])
        config["tls_config"] = tls_config
    auth = endpoint.get("basicAuth")
    if auth:
        config["basic_auth"] = {
            "username": secrets[auth["username"]["name"]][auth["username"]["key"]].read_text(),
            "password_file": str(secrets[auth["password"]["name"]][auth["password"]["key"]]),
        }
    return config


@pytest.mark.prometheus
def test_real_prometheus_scrapes_the_sidecar_over_tls_with_basic_auth_from_the_generated_settings(
    prometheus_factory: Callable[..., LocalPrometheus], tmp_path: Path
) -> None:
    pki: Pki = make_pki(tmp_path / "pki")
    web_config = pki.folder / "web-config.yml"
    web_config.write_text(
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  client_ca_file: ca.crt\n"
        "  client_auth_type: RequireAndVerifyClientCert\n"
        f"basic_auth_users:\n  prometheus: {hash_password('scrape-pass', rounds=4)}\n"
    )
    username, password = tmp_path / "username", tmp_path / "password"
    username.write_text("prometheus")
    password.write_text("scrape-pass")
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-it")
    secrets = {
        "slokit-gpu-web": {"ca.crt": pki.ca},
        "prometheus-gpu-scrape": {"tls.crt": pki.client_cert, "tls.key": pki.client_key},
        "slokit-gpu-basic-auth": {"username": username, "password": password},
        "wrong-auth": {"username": username, "password": wrong},
    }
    endpoint = gpu_endpoint(objects(tls_spec()))
    poller = GpuPoller(FakeNvml([FakeGpu(A)]), interval=0.2)
    server = GpuServer(poller, LOOPBACK, 0, load_web_config(web_config))
    poller.start()
    server.start()
    target = f"{LOOPBACK}:{server.port}"
    wrong_endpoint = {**endpoint, "basicAuth": {"username": endpoint["basicAuth"]["username"],
                                                "password": {"name": "wrong-auth", "key": "password"}}}  # fmt: skip
    try:
        prom = prometheus_factory(
            scrape_configs=[
                scrape_config("gpu", endpoint, target, secrets),
                scrape_config("gpu-wrong-password", wrong_endpoint, target, secrets),
                scrape_config("gpu-plain", {"path": "/metrics"}, target, secrets),
            ],
            scrape_interval="1s",
        )
        prom.start()
        result = prom.wait_for(f'{S.GPU_UP}{{job="gpu"}}', timeout=60)
        assert [s.value for s in result.samples] == [1.0]
        prom.wait_for('up{job=~"gpu-wrong-password|gpu-plain"} == 0', timeout=60, min_series=2)
        health = {t["labels"]["job"]: t for t in prom.targets()}
        assert health["gpu"]["health"] == "up", health["gpu"]
        assert "401" in health["gpu-wrong-password"]["lastError"], health["gpu-wrong-password"]
        assert health["gpu-plain"]["health"] == "down"
        assert not prom.query(f'{S.GPU_UP}{{job!="gpu"}}').samples
    finally:
        server.close()
        poller.stop()
