"""Backtesting alerts on history: simulate raw vLLM history, evaluate the generated rules over it, report.

`simulate` writes realistic raw series (OpenMetrics, the format `promtool tsdb create-blocks-from openmetrics`
reads) with labelled incidents; `evaluate` runs the generated recording rules and alert expressions over any such
history with the real Prometheus engine and applies `for`/`keep_firing_for` as Prometheus does; `report` turns the
firing intervals into pages per week, detection times per incident, Markdown, HTML and CSV.
"""
