"""The benchmark figures the README and docs quote are those in bench/results/, and those were measured on the code
as it is now. No benchmark runs here: the checks read the committed results files and the documents."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REQUIRED = ("commit", "date", "machine", "settings", "figures", "runs", "sources")


def bench_results() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_results", ROOT / "bench" / "results.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_results"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


R = bench_results()
RESULTS = sorted(R.RESULTS_DIR.glob("*.json"))


def test_every_benchmark_has_a_complete_results_file() -> None:
    assert {p.stem for p in RESULTS} == set(R.SOURCES), "run `make bench` (or `make bench-NAME`) and commit"
    for path in RESULTS:
        data = json.loads(path.read_text(encoding="utf-8"))
        missing = [k for k in REQUIRED if not data.get(k)]
        assert not missing, f"{path.name} lacks {missing}"
        assert len(data["commit"]) == 40, path.name
        assert data["machine"]["cores"] >= 1 and len(data["machine"]["load_before"]) == 3, path.name
        assert data["sources"]["files"], path.name


@pytest.mark.parametrize("path", RESULTS, ids=[p.stem for p in RESULTS])
def test_results_were_measured_on_the_current_sources(path: Path) -> None:
    data = R.load(path.stem)
    stale = R.stale_sources(data)
    assert not stale, (
        f"{path.name} was measured on other versions of {stale}: re-run `make bench-{path.stem}` and commit the "
        "results (and the figures the README quotes from them)"
    )
    recorded = data["sources"]
    assert R.combined_hash(recorded["files"]) == recorded["hash"], f"{path.name}: sources hashes edited by hand"


def test_every_quoted_figure_is_in_its_results_file() -> None:
    quotes = [q for doc in DOCUMENTS for q in R.quoted(doc)]
    problems = []
    for quote in quotes:
        try:
            problem = R.check_quote(quote, R.load(quote.name))
        except R.ResultsError as exc:
            problem = f"{quote.document}:{quote.line}: {exc}"
        if problem:
            problems.append(problem)
    assert not problems, "\n".join(problems)
    # The README quotes the exporter's cost, the soak and the probe's accuracy from results files.
    assert {q.name for q in quotes if q.document == "README.md"} >= {"exporter_overhead", "soak", "probe_accuracy"}


# -- the checks themselves can fail ----------------------------------------------------------------------------
def _results(tmp_path: Path, figures: dict[str, object]) -> dict[str, object]:
    (tmp_path / "bench").mkdir()
    shutil.copy(ROOT / "bench" / "fuzz.py", tmp_path / "bench" / "fuzz.py")
    for source in ("slokit/spec", "slokit/exporters"):
        shutil.copytree(ROOT / source, tmp_path / source, ignore=shutil.ignore_patterns("__pycache__", "gpu"))
    paths = R.source_files("fuzz", tmp_path)
    return {"name": "fuzz", "figures": figures, "sources": R.hash_sources(paths, tmp_path)}


def test_an_edited_source_makes_its_results_stale(tmp_path: Path) -> None:
    data = _results(tmp_path, {})
    assert R.stale_sources(data, tmp_path) == []
    target = tmp_path / "slokit" / "spec" / "model.py"
    target.write_text(target.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    assert R.stale_sources(data, tmp_path) == ["slokit/spec/model.py"]
    (tmp_path / "slokit" / "spec" / "added.py").write_text("X = 1\n", encoding="utf-8")
    assert "slokit/spec/added.py" in R.stale_sources(data, tmp_path)


def test_a_file_a_benchmark_takes_out_of_its_sources_never_makes_it_stale() -> None:
    """The fleet and rule-cost benchmarks glob the generators but take out the mutation harness, which they never
    run; every other generator still counts."""
    for name in ("fleet", "rule_cost", "rule_cost_realistic"):
        files = R.source_files(name)
        assert "slokit/generate/mutants.py" not in files and "slokit/generate/alerts.py" in files, name
        data = {"name": name, "sources": R.hash_sources(files)}
        data["sources"]["files"]["slokit/generate/mutants.py"] = "an older version"
        assert R.stale_sources(data) == []
        data["sources"]["files"]["slokit/generate/alerts.py"] = "an older version"
        assert R.stale_sources(data) == ["slokit/generate/alerts.py"]


def test_a_wrong_or_unwritten_figure_is_reported(tmp_path: Path) -> None:
    data = {"name": "fuzz", "figures": {"spec": {"cases": 10000, "slowest_ms": 12.34}}}
    doc = tmp_path / "doc.md"
    doc.write_text(
        "Intro.\n\nThe spec target ran 10,000 cases, the slowest 12.3 ms.\n"
        "<!-- bench fuzz: spec.cases=10,000 spec.slowest_ms=12.3 -->\n\n"
        "Wrong: 12.4 ms. <!-- bench fuzz: spec.slowest_ms=12.4 -->\n\n"
        "Not written here. <!-- bench fuzz: spec.cases=10000 -->\n\n"
        "Missing key 5 <!-- bench fuzz: spec.nothing=5 -->\n",
        encoding="utf-8",
    )
    quotes = R.quoted(doc, tmp_path)
    assert [(q.key, q.text) for q in quotes] == [
        ("spec.cases", "10,000"), ("spec.slowest_ms", "12.3"), ("spec.slowest_ms", "12.4"), ("spec.cases", "10000"),
        ("spec.nothing", "5"),
    ]  # fmt: skip
    problems = [R.check_quote(q, data) for q in quotes]
    assert problems[:2] == [None, None]
    assert "results file has 12.34" in str(problems[2])
    assert "not written in the paragraph" in str(problems[3])
    assert "no figure 'spec.nothing'" in str(problems[4])


def test_an_unreadable_marker_is_an_error(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("x <!-- bench fuzz: cases=many -->\n", encoding="utf-8")
    with pytest.raises(R.ResultsError, match="unreadable marker"):
        R.quoted(doc, tmp_path)
