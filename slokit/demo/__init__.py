"""`slokit demo`: the whole path from a token leaving vLLM to a page in Alertmanager, on one machine.

- `config`: the demo's settings, the alerting contract it checks, and what happened (`DemoResult`)
- `output`: the reporters (a terminal's live status line, or plain timestamped lines)
- `contract`: reading the generated contract back (the expected page, alert and notification fields, the runbook)
- `traffic`: healthy traffic and the flood, driven by slokit's probe
- `readings`: what the demo reads from its Prometheus
- `stack`: vLLM, the GPU sidecar, Prometheus, Alertmanager and the webhook on loopback ports; signal handling
- `story`: the steps in order, and `run_demo`
"""

from slokit.demo.config import (
    CONTRACT_ANNOTATIONS,
    CONTRACT_LABELS,
    DEMO_SPEC,
    Check,
    DemoAborted,
    DemoConfig,
    DemoInputError,
    DemoResult,
)
from slokit.demo.contract import (
    alert_matches,
    alert_name,
    causes,
    contract_gaps,
    demo_class,
    describe_notification,
    expected_alerts,
    fire_time,
    first_query,
    linked_guide,
    load_demo_spec,
    runbook_section,
    section_excerpt,
)
from slokit.demo.output import PlainReporter, Reporter, TerminalReporter
from slokit.demo.story import run_demo
from slokit.demo.traffic import BackgroundLoad, LoadLevel, LoadTally, run_load, tokens_per_word
from slokit.spec import SpecError

__all__ = [
    "CONTRACT_ANNOTATIONS",
    "CONTRACT_LABELS",
    "DEMO_SPEC",
    "BackgroundLoad",
    "Check",
    "DemoAborted",
    "DemoConfig",
    "DemoInputError",
    "DemoResult",
    "LoadLevel",
    "LoadTally",
    "PlainReporter",
    "Reporter",
    "SpecError",
    "TerminalReporter",
    "alert_matches",
    "alert_name",
    "causes",
    "contract_gaps",
    "demo_class",
    "describe_notification",
    "expected_alerts",
    "fire_time",
    "first_query",
    "linked_guide",
    "load_demo_spec",
    "run_demo",
    "run_load",
    "runbook_section",
    "section_excerpt",
    "tokens_per_word",
]
