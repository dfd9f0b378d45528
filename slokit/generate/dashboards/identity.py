"""What Grafana knows the generated dashboards and panels by: stable uids, panel references, variable values.

Plain data with no grafanalib in it, because the runbook and the alerts link to panels through these references and
must not depend on how the panels are drawn.
"""

from __future__ import annotations

import hashlib
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from slokit import schema
from slokit.spec import Spec


@dataclass(frozen=True)
class PanelRef:
    """Where one panel lives: dashboard uid and title, panel id and title."""

    dashboard: str  # short name: overview, latency, debugging
    uid: str
    dashboard_title: str
    panel_id: int
    title: str

    def path(self, variables: Mapping[str, str] | None = None) -> str:
        """The Grafana path (no host) that opens this panel alone, with variables preset."""
        query: list[tuple[str, str]] = [("orgId", "1"), ("viewPanel", str(self.panel_id))]
        for name, value in (variables or {}).items():
            query.append((f"var-{name}", value))
        slug = _slug(self.dashboard_title)
        return f"/d/{self.uid}/{slug}?{urllib.parse.urlencode(query)}"


@dataclass(frozen=True)
class Built:
    """Every dashboard of one spec and the panel references the runbook links to."""

    dashboards: Mapping[str, dict[str, Any]]  # short name -> dashboard JSON data
    refs: Mapping[tuple[str, ...], PanelRef]


def dashboard_uid(spec: Spec, name: str) -> str:
    """Stable uid (Grafana allows 40 characters): `<service>-<name>`, hashed when the service name is long."""
    uid = f"{spec.service}-{name}"
    if len(uid) <= 40:
        return uid
    digest = hashlib.sha256(spec.service.encode()).hexdigest()[:8]
    return f"{spec.service[: 40 - len(name) - 10]}-{digest}-{name}"


# Grafana keeps panel ids as 32-bit integers in places (alert rules' __panelId__, older clients): stay below 2^31.
PANEL_ID_RANGE: Final = 2**31 - 1


def panel_id(uid: str, key: tuple[str, ...], salt: int = 0) -> int:
    """A panel's id: a hash of its dashboard's uid and its key (what it shows), in 1..2^31-1.

    The id depends on nothing else, so adding, removing or moving another panel leaves it alone and a user's
    `viewPanel=<id>` link survives an upgrade. `salt` > 0 gives the next candidate when two keys of one dashboard
    hash to the same id (`Board` checks; about one dashboard in 10^5 with 200 panels).
    """
    text = "\x1f".join((uid, *key)) + (f"\x1e{salt}" if salt else "")
    digest = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    return 1 + digest % PANEL_ID_RANGE


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def model_values(spec: Spec) -> list[str]:
    """The values of the `model` variable: the spec's served model names."""
    return [model.name for model in spec.models]


def class_values(spec: Spec) -> list[str]:
    """The values of the `class` variable: the spec's classes, plus `other` where the exporter counts it."""
    values = [request_class.name for request_class in spec.classes]
    if spec.source.counts_other_class:
        values.append(schema.OTHER_CLASS)
    return values
