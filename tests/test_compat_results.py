"""`make compat`'s committed results (compat/results.json) and what docs/interop.md says of them agree: every
default release was run, and the table says "passed" exactly for the releases that passed."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "compat" / "results.json"
INTEROP = ROOT / "docs" / "interop.md"


def _default_releases() -> tuple[str, ...]:
    text = (ROOT / "scripts" / "compat.py").read_text(encoding="utf-8")
    found = re.search(r"DEFAULT_RELEASES: Final = \(([^)]*)\)", text)
    assert found, "scripts/compat.py names its default releases"
    return tuple(re.findall(r'"([^"]+)"', found.group(1)))


def test_every_default_release_has_a_result_and_the_docs_table_agrees() -> None:
    document = json.loads(RESULTS.read_text(encoding="utf-8"))
    outcomes = {r["release"]: r for r in document["releases"]}
    assert set(_default_releases()) <= set(outcomes), "re-run `make compat` after changing its releases"
    table = INTEROP.read_text(encoding="utf-8").split("## Real vLLM releases", 1)[1].split("\n## ", 1)[0]
    for release, outcome in outcomes.items():
        short = release.split(".post")[0]
        said = [
            line for line in table.splitlines() if line.startswith("|") and re.search(rf"\b{re.escape(short)}\b", line)
        ]
        assert said, f"docs/interop.md's table does not mention {short}"
        passed = any(re.search(rf"\b{re.escape(short)}\b[^|;]*\bpassed\b", line) for line in said)
        assert passed == (outcome["status"] == "passed"), (release, outcome["status"], said)
        if outcome["status"] == "passed":
            assert not outcome["vllm_names_missing"] and outcome["requests_ok"] == outcome["requests_sent"] > 0
