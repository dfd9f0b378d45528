"""Grafana provisioning files for the generated dashboards: a datasource and a file provider, for a fresh
Grafana (every board also has a `datasource` variable, so any Prometheus datasource works).
"""

from __future__ import annotations

from typing import Final

PROVISIONED_DATASOURCE_UID: Final = "slokit-prometheus"


PROVISIONING_DATASOURCE_PATH: Final = "dashboards/provisioning/datasources/slokit.yaml"


PROVISIONING_DASHBOARDS_PATH: Final = "dashboards/provisioning/dashboards/slokit.yaml"


GRAFANA_DASHBOARD_DIR: Final = "/var/lib/grafana/dashboards/slokit"


DATASOURCE_PROVISIONING: Final = f"""\
# Grafana datasource for the slokit dashboards. Mount as /etc/grafana/provisioning/datasources/slokit.yaml and
# point `url` at your Prometheus (or Thanos/Mimir query frontend). Every slokit dashboard has a `datasource`
# variable, so any Prometheus datasource works; this one is only for a fresh Grafana.
apiVersion: 1
datasources:
  - name: slokit Prometheus
    uid: {PROVISIONED_DATASOURCE_UID}
    type: prometheus
    access: proxy
    url: http://localhost:9090
    isDefault: false
    editable: false
    jsonData:
      timeInterval: 15s
"""


DASHBOARD_PROVISIONING: Final = f"""\
# Grafana dashboard provider for the generated dashboards. Mount as
# /etc/grafana/provisioning/dashboards/slokit.yaml and the generated dashboards/*.json at {GRAFANA_DASHBOARD_DIR}.
apiVersion: 1
providers:
  - name: slokit
    folder: slokit
    type: file
    disableDeletion: true
    allowUiUpdates: false
    updateIntervalSeconds: 60
    options:
      path: {GRAFANA_DASHBOARD_DIR}
      foldersFromFilesStructure: false
"""
