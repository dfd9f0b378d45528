"""Alertmanager configuration: one incident reaches a person as one page.

`alertmanager/<service>.yaml` is a complete configuration (`amtool check-config` accepts it as it is) made to be
merged into a team's own (docs/rules.md, "Merging the Alertmanager configuration"; `merge` below does it):

* **Receivers** named in `alerting.receivers` (`page`, `ticket`), declared without integrations: the team's
  configuration supplies the pager and the ticket queue under the same names.
* **One route subtree** for the service (`service="<name>"`): pages group by service and model, so the pages of
  every class of one model, and the engine alerts that explain them (queue, KV cache, preemption; generated as
  `cause: engine` copies only while a page fires, see alerts.py), arrive as one notification. Tickets group by
  service, model and class.
* **Inhibitions**: a page mutes the tickets of the same service, model, class and SLO (the ticket tiers say the
  same thing slower); a page mutes the engine tickets of its model (they are inside the page as causes); the
  exporter-gone page mutes every SLO alert of its model (they are blind without its metrics).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from slokit import schema
from slokit.generate import alerts
from slokit.spec import Spec

GROUP_WAIT: Final = "30s"  # long enough for the burst of one incident's alerts to land in one notification
GROUP_INTERVAL: Final = "5m"
PAGE_REPEAT: Final = "1h"
TICKET_REPEAT: Final = "12h"
PAGE_GROUP_BY: Final = (schema.RULE_LABEL_SERVICE, schema.RULE_LABEL_MODEL)
TICKET_GROUP_BY: Final = (schema.RULE_LABEL_SERVICE, schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS)


def path(spec: Spec) -> str:
    """Where the configuration is written, relative to the output directory."""
    return f"alertmanager/{spec.service}.yaml"


def _matcher(label: str, value: str, op: str = "=") -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'{label}{op}"{escaped}"'


def _names(names: tuple[str, ...]) -> str:
    return "|".join(sorted(names))


def route(spec: Spec) -> dict[str, Any]:
    """The service's route subtree: pages and tickets, each to its receiver, grouped as the module says."""
    severity, receivers = spec.alerting.severity, spec.alerting.receivers
    return {
        "receiver": receivers.ticket,
        "matchers": [_matcher(schema.RULE_LABEL_SERVICE, spec.service)],
        "group_by": list(TICKET_GROUP_BY),
        "group_wait": GROUP_WAIT,
        "group_interval": GROUP_INTERVAL,
        "repeat_interval": TICKET_REPEAT,
        "routes": [
            {
                "receiver": receivers.page,
                "matchers": [_matcher("severity", severity.page)],
                "group_by": list(PAGE_GROUP_BY),
                "repeat_interval": PAGE_REPEAT,
            },
            {"receiver": receivers.ticket, "matchers": [_matcher("severity", severity.ticket)]},
        ],
    }


def inhibit_rules(spec: Spec) -> list[dict[str, Any]]:
    """Page over ticket (same SLO), page over engine tickets (same model), exporter gone over SLO alerts."""
    severity = spec.alerting.severity
    service = _matcher(schema.RULE_LABEL_SERVICE, spec.service)
    return [
        {
            "source_matchers": [service, _matcher("severity", severity.page)],
            "target_matchers": [service, _matcher("severity", severity.ticket)],
            "equal": [schema.RULE_LABEL_SERVICE, schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS,
                      schema.RULE_LABEL_SLO],
        },
        {
            "source_matchers": [service, _matcher("severity", severity.page)],
            "target_matchers": [
                service,
                _matcher("severity", severity.ticket),
                _matcher("alertname", _names(alerts.ENGINE_ALERTS), "=~"),
            ],
            "equal": [schema.RULE_LABEL_SERVICE, schema.RULE_LABEL_MODEL],
        },
        {
            "source_matchers": [service, _matcher("alertname", schema.ALERT_EXPORTER_GONE)],
            "target_matchers": [service, _matcher("alertname", _names(alerts.SLO_ALERTS), "=~")],
            "equal": [schema.RULE_LABEL_SERVICE, schema.RULE_LABEL_MODEL],
        },
    ]  # fmt: skip


def config(spec: Spec) -> dict[str, Any]:
    """The complete configuration: a root route to the ticket receiver with the service's subtree under it."""
    receivers = spec.alerting.receivers
    return {
        "route": {"receiver": receivers.ticket, "routes": [route(spec)]},
        "receivers": [{"name": receivers.page}, {"name": receivers.ticket}],
        "inhibit_rules": inhibit_rules(spec),
    }


def merge(team: Mapping[str, Any], generated: Mapping[str, Any]) -> dict[str, Any]:
    """The team's configuration with slokit's subtree first among its routes, its inhibitions appended, and
    slokit's receivers added only where the team has none of that name (the team's carry the integrations)."""
    out = copy.deepcopy(dict(team))
    root = out.setdefault("route", {})
    root["routes"] = [*copy.deepcopy(generated["route"]["routes"]), *root.get("routes", [])]
    have = {r["name"] for r in out.get("receivers", [])}
    out["receivers"] = [*out.get("receivers", []), *(r for r in generated["receivers"] if r["name"] not in have)]
    out["inhibit_rules"] = [*out.get("inhibit_rules", []), *copy.deepcopy(generated["inhibit_rules"])]
    return out


def files(spec: Spec) -> dict[str, Any]:
    """`alertmanager/<service>.yaml`."""
    return {path(spec): config(spec)}
