"""What the demo is given and what it records: its settings, the alerting contract it checks, and the result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from slokit.generate.model import AlertKind
from slokit.local.webhook import Notification

DEMO_SPEC: Final = Path(__file__).parent.parent / "data" / "demo.yaml"
CONTRACT_LABELS: Final = ("severity", "service", "slo", "model", "class")
CONTRACT_ANNOTATIONS: Final = ("summary", "description", "runbook_url")
# The SLO pages the fault is expected to raise: a percentile past its critical tier, or the fast burn-rate
# tier. Both read 5m rates of slokit's per-class TTFT histogram, so they react within a minute.
EXPECTED_KINDS: Final = (AlertKind.TIER, AlertKind.BURN_RATE)
QUEUE_READINGS: Final = 15  # readings of the runbook's queue query, a second apart, before saying it shows none


class DemoInputError(Exception):
    """The demo cannot start from this input (not a demo spec, nothing to alert on); exit code 2."""


class DemoAborted(Exception):
    """A step that later steps need did not happen; the message says which and why."""


@dataclass(frozen=True)
class DemoConfig:
    """How the demo runs. Defaults fit a 2-core machine with no GPU in a few minutes."""

    spec_path: Path = DEMO_SPEC
    output: Path | None = None  # where generated files and logs go; None: a new temporary directory
    healthy_seconds: float = 40.0  # length of the healthy phase
    healthy_rate: float = 1.5  # requests/s of healthy traffic
    fault_concurrency_factor: int = 12  # the flood keeps this many x max_num_seqs requests in flight
    fault_prompt_tokens: int = 400  # long prompts: prefill dominates and nothing is cached
    fault_output_tokens: int = 64  # long enough that each request holds its slot for a while
    fault_max_seconds: float = 300.0  # the flood stops by itself after this long
    fault_max_requests: int = 4000
    max_model_len: int = 512
    scrape_interval: str = "2s"
    evaluation_interval: str = "2s"  # rule groups are evaluated at most this far apart in the demo
    startup_timeout: float = 300.0  # vLLM on two busy cores can take minutes
    alert_timeout: float = 240.0  # from the start of the fault to the expected alert firing
    notify_timeout: float = 90.0  # from firing to the webhook receiving it
    cause_timeout: float = 30.0  # from the page notification to its group carrying the engine cause
    group_wait: str = "1s"  # Alertmanager's grouping timers for the demo (the generated file's are 30s and 5m)
    group_interval: str = "5s"


@dataclass(frozen=True)
class Check:
    """One step of the story and whether it happened."""

    name: str
    ok: bool
    detail: str


@dataclass
class DemoResult:
    """What happened. `ok` is the exit status of the unattended run."""

    output: Path
    checks: list[Check] = field(default_factory=list)
    expected_alert: str = ""  # the pages the fault may raise; once one fired, its name
    fired_alert: Mapping[str, Any] = field(default_factory=dict)  # Prometheus /api/v1/alerts entry
    other_alerts: list[str] = field(default_factory=list)  # other alerts firing during the fault
    healthy_firing: list[str] = field(default_factory=list)  # alerts seen firing in the healthy phase (should be none)
    notification: Notification | None = None
    page_alerts: list[str] = field(default_factory=list)  # the alerts of the page notification, one line each
    page_groups: int = 0  # distinct page notification groups the webhook received (one incident: 1)
    runbook_path: Path | None = None
    runbook_section: str = ""
    runbook_query: str = ""
    queue_depth: float | None = None
    report_path: Path | None = None  # the SLO report of the run (`slokit report`)
    healthy_requests: int = 0
    seconds_to_fire: float | None = None  # from the start of the fault to the page firing in Prometheus
    seconds_to_notify: float | None = None  # from the page firing (activeAt + for:) to the webhook receiving it
    fault_requests: int = 0
    pids: dict[str, int] = field(default_factory=dict)  # process name -> pid, for the "all stopped" check
    ports: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        """Whether the story happened as told: every check passed and nothing was interrupted."""
        return bool(self.checks) and all(c.ok for c in self.checks) and not self.interrupted

    def add(self, name: str, ok: bool, detail: str) -> Check:
        """Record one check."""
        check = Check(name, ok, detail)
        self.checks.append(check)
        return check
