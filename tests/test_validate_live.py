"""`slokit validate --prometheus`: thresholds checked against the bucket boundaries a real Prometheus scraped.

A small real HTTP target serves a gateway's millisecond TTFT histogram (its own model label, a `route` label, and
a staging copy with other boundaries that the spec's `selector:` must keep out); a real Prometheus scrapes it on
loopback. The spec names the histogram without `buckets:`, so only the live check can tell a threshold that misses.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from slokit.cli import app

LOOPBACK = "127.0.0.1"
PROD_LE_MS = (100, 250, 400, 500, 1000, 2500)  # 400: the scale-out boundary of 500ms
STAGING_LE_MS = (100, 300, 700)


def _exposition() -> str:
    lines = ["# TYPE gw_ttft_ms histogram"]
    for namespace, bounds in (("prod", PROD_LE_MS), ("staging", STAGING_LE_MS)):
        labels = f'namespace="{namespace}",upstream="llama-3-8b",route="/v1/chat/completions"'
        for i, le in enumerate(bounds):
            lines.append(f'gw_ttft_ms_bucket{{{labels},le="{le}"}} {10 * (i + 1)}')
        lines.append(f'gw_ttft_ms_bucket{{{labels},le="+Inf"}} 100')
        lines.append(f"gw_ttft_ms_count{{{labels}}} 100")
        lines.append(f"gw_ttft_ms_sum{{{labels}}} 12345")
    return "\n".join(lines) + "\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = _exposition().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def scraped(prometheus_factory: Any) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer((LOOPBACK, 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        prom = prometheus_factory(
            static_targets={"gateway": [f"{LOOPBACK}:{server.server_port}"]}, scrape_interval="1s"
        )
        prom.start()
        prom.wait_for('gw_ttft_ms_bucket{namespace="staging"}', timeout=60)
        yield prom.url
    finally:
        server.shutdown()
        server.server_close()


SPEC = """\
version: slokit/v1
service: gateway
selector: {{namespace: prod}}
models:
  - {{name: llama-3-8b}}
classes:
  - name: chat
    slos:
      ttft:
        metric:
          {{histogram: {name}, model_label: upstream, selector: {{route: /v1/chat/completions}}, unit: ms{buckets}}}
        objective: {{percentile: 95, threshold: {threshold}}}
"""


def _validate(tmp_path: Path, url: str, threshold: str, name: str = "gw_ttft_ms", buckets: str = "") -> Any:
    path = tmp_path / "gateway.yaml"
    path.write_text(SPEC.format(threshold=threshold, name=name, buckets=buckets), encoding="utf-8")
    return CliRunner().invoke(app, ["validate", str(path), "--prometheus", url])


@pytest.mark.prometheus
@pytest.mark.timeout(120)
def test_live_boundaries_in_the_specs_scope(tmp_path: Path, scraped: str) -> None:
    # Without declared buckets slokit assumes its own ladder for the scale-out boundary of 0.8 x 500ms, and its
    # nearest at or below 400ms is 300ms, which this histogram does not have: the live check says so.
    undeclared = _validate(tmp_path, scraped, "500ms")
    assert undeclared.exit_code == 1, undeclared.output
    assert "chat ttft (gw_ttft_ms_bucket): 6 live boundaries" in undeclared.stdout  # staging's 3 kept out
    assert "the threshold 500ms is not" not in undeclared.stderr
    assert "the scale-out boundary 300ms is not a live bucket boundary (nearest are 250ms and 400ms)" in (
        undeclared.stderr
    )

    declared = _validate(tmp_path, scraped, "500ms", buckets=", buckets: [100, 250, 400, 500, 1000, 2500]")
    assert declared.exit_code == 0, declared.output

    # 300ms is a boundary only of the staging copy, which the spec's selector excludes.
    missed = _validate(tmp_path, scraped, "300ms", buckets=", buckets: [100, 250, 300, 400]")
    assert missed.exit_code == 1, missed.output
    assert "the threshold 300ms is not a live bucket boundary (nearest are 250ms and 400ms)" in missed.stderr

    absent = _validate(tmp_path, scraped, "500ms", name="gw_ttft_seconds")
    assert absent.exit_code == 1
    assert "no series at" in absent.stderr and 'namespace="prod"' in absent.stderr


def test_unreachable_prometheus_exits_2(tmp_path: Path) -> None:
    result = _validate(tmp_path, f"http://{LOOPBACK}:9", "500ms")
    assert result.exit_code == 2
    assert "did not answer" in result.stderr and "Traceback" not in result.output
