"""`slokit exporter gpu`: the NVML sidecar that serves GPU metrics next to vLLM.

The vLLM side needs no command: slokit's stat-logger plugin loads inside `vllm serve` when slokit is installed
and `SLOKIT_SPEC` points at the spec.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from slokit import schema
from slokit.commands.common import EXIT_FAILED, EXIT_USAGE
from slokit.units import DurationError, parse_duration

exporter_app = typer.Typer(
    name="exporter",
    help="Exporters that run beside vLLM. The vLLM side is a stat-logger plugin; this group holds the GPU sidecar.",
    no_args_is_help=True,
    add_completion=False,
)

UUID_RE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z-]+$")


def _parse_gpus(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    items = [item.strip() for item in text.replace(" ", ",").split(",") if item.strip()]
    bad = [item for item in items if not UUID_RE.match(item)]
    if bad:
        typer.echo(
            f"--gpus: {bad[0]!r} is not a GPU UUID; expected UUIDs as `nvidia-smi -L` prints them "
            "(GPU-8e2f..., or MIG-... for a MIG instance), separated by commas",
            err=True,
        )
        raise typer.Exit(EXIT_USAGE)
    return tuple(items)


@exporter_app.command("gpu")
def gpu(
    address: Annotated[
        str,
        typer.Option(
            help="Address to listen on. Loopback by default; in a pod pass the pod IP (the generated Deployment "
            "passes --address=$(POD_IP) so Prometheus and the kubelet reach it, and nothing else on the node does)."
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port for /metrics and /healthz.")] = (
        schema.GPU_EXPORTER_PORT
    ),
    interval: Annotated[
        str, typer.Option(help="How often to poll NVML (at least 100ms; at most half the scrape interval).")
    ] = "1s",
    gpus: Annotated[
        str | None,
        typer.Option(help="Watch only these GPUs: UUIDs separated by commas (default: every GPU NVML sees)."),
    ] = None,
    gpus_file: Annotated[
        Path | None,
        typer.Option(
            help="Watch the GPUs whose UUIDs this file lists (one per line or comma-separated), re-read when it "
            "changes; the generated pod spec has the vLLM container write it. Nothing is polled until it exists."
        ),
    ] = None,
    web_config_file: Annotated[
        Path | None,
        typer.Option(
            "--web.config.file",
            help="TLS and basic auth: a web-config file in the Prometheus exporter-toolkit format "
            "(tls_server_config, basic_auth_users with bcrypt hashes, http_server_config.headers). Checked at start: "
            "a bad certificate, key or hash exits 2. /healthz stays without basic auth for the kubelet.",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Serve NVML metrics of the GPUs beside vLLM on /metrics and /healthz.

    One thread polls NVML every --interval and keeps a snapshot; a scrape
    only converts it, so it never waits on the driver. Metrics a GPU cannot
    answer are left out and logged once (slokit_gpu_metric_supported says
    which). A lost GPU reads slokit_gpu_up 0 and is re-opened with backoff;
    without a driver every scrape answers slokit_gpu_up 0. SIGTERM stops it
    cleanly (exit 0). Metrics and deployment: docs/gpu-exporter.md.

    Limits: request line 8 KiB, headers 16 KiB, no request body, 10 s for the
    TLS handshake and 10 s for each whole request (not per read: a client
    trickling bytes is cut off), 32 connections at once.

    Examples:

      slokit exporter gpu

      slokit exporter gpu --gpus GPU-8e2f...,GPU-1c0a...

      slokit exporter gpu --gpus-file /var/run/slokit/gpus

      slokit exporter gpu --address 0.0.0.0 --web.config.file /etc/slokit/web/web-config.yml
    """
    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        typer.echo(f"--log-level: {log_level!r} is not one of debug, info, warning, error", err=True)
        raise typer.Exit(EXIT_USAGE)
    try:
        seconds = parse_duration(interval)
    except DurationError as error:
        typer.echo(f"--interval: {error}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    # Imported here so `slokit --help` and the other commands never load the NVML bindings.
    from slokit.exporters.gpu.fields import MIN_INTERVAL
    from slokit.exporters.gpu.poller import GpuPoller
    from slokit.exporters.gpu.server import GpuServer, serve_until_signalled

    if seconds < MIN_INTERVAL or seconds > 60:
        typer.echo(f"--interval: {interval} is outside 100ms..60s (GPM needs 100ms between samples)", err=True)
        raise typer.Exit(EXIT_USAGE)
    wanted = _parse_gpus(gpus)
    if wanted and gpus_file is not None:
        typer.echo("--gpus and --gpus-file choose GPUs two ways; pass one of them", err=True)
        raise typer.Exit(EXIT_USAGE)
    from slokit.exporters.webconfig import WebConfig, WebConfigError, load_web_config

    web_config = WebConfig()
    if web_config_file is not None:
        try:
            web_config = load_web_config(web_config_file)
        except WebConfigError as error:
            typer.echo(f"--web.config.file: {error}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    poller = GpuPoller(interval=seconds, uuids=wanted, uuids_file=gpus_file)
    try:
        server = GpuServer(poller, address, port, web_config)
    except OSError as error:
        typer.echo(f"cannot listen on {address}:{port}: {error.strerror}; pick another --port or --address", err=True)
        raise typer.Exit(EXIT_FAILED) from None

    if web_config.ignored:
        logging.getLogger("slokit.gpu").warning(
            "%s: accepted but ignored: %s (the sidecar speaks HTTP/1.1 and lets Python's TLS stack choose ciphers "
            "and curves)",
            web_config.path,
            ", ".join(web_config.ignored),
        )

    def ready() -> None:
        auth = ", basic auth" if web_config.users else ""
        logging.getLogger("slokit.gpu").info("serving %s://%s:%d/metrics%s", server.scheme, address, server.port, auth)

    serve_until_signalled(poller, server, on_ready=ready)


def register(app: typer.Typer) -> None:
    """Add the `exporter` command group."""
    app.add_typer(exporter_app, name="exporter")
