"""What the exporter relies on inside vLLM (slokit/exporters/vllm_internals.py): the installed release has all of
it, the check names each kind of break in a release's source, and the list matches the exporter's own code."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any

import pytest

from slokit.exporters import vllm_internals as vi


def _installed(path: str) -> str | None:
    import vllm

    file = Path(vllm.__file__).parent.parent / path
    return file.read_text(encoding="utf-8") if file.is_file() else None


@pytest.mark.vllm
def test_the_installed_vllm_has_everything_the_exporter_relies_on() -> None:
    assert vi.installed_gaps() == []


@pytest.mark.vllm
def test_a_renamed_field_a_changed_signature_a_missing_class_and_group_are_each_named() -> None:
    """Each edit of the installed release's real source is reported once, naming the file and the member."""
    edits = {
        vi.STATS: [("first_token_latency", "first_token_delay")],
        vi.LOGGERS: [("engine_idx: int = 0", "engine_idx: int = 0, extra: int = 0")],
        vi.ENGINE: [("class EngineCoreRequest(", "class EngineRequest(")],
        vi.PLUGINS: [('"vllm.stat_logger_plugins"', '"vllm.stat_loggers"')],
    }

    def read(path: str) -> str | None:
        text = _installed(path)
        assert text is not None, path
        for old, new in edits.get(path, []):
            assert old in text, (path, old)
            text = text.replace(old, new)
        return text

    problems = vi.missing(read)
    assert f"{vi.STATS}: RequestStateStats.first_token_latency is gone" in problems
    assert any(p.startswith(f"{vi.LOGGERS}: StatLoggerBase.record(") and "extra" in p for p in problems), problems
    assert f"{vi.ENGINE}: no class EngineCoreRequest" in problems
    assert any("vllm.stat_logger_plugins" in p for p in problems), problems
    assert len(problems) == 4, problems


def test_fields_behind_type_checking_on_a_base_class_or_set_in_a_method_count() -> None:
    """Fields as vLLM writes them: annotated under `if TYPE_CHECKING:` (vLLM 0.34's EngineCoreRequest), on a base
    class in the same file (PrefixCacheStats), or assigned to self in a method (OutputProcessor)."""
    source = {
        vi.STATS: """
class BaseCacheStats:
    queries: int = 0
    hits: int = 0
class PrefixCacheStats(BaseCacheStats):
    pass
""",
        vi.ENGINE: """
if TYPE_CHECKING:
    pass
class EngineCoreRequest:
    request_id: str
    if TYPE_CHECKING:
        prompt_token_ids: list[int] | None
    else:
        prompt_token_ids: object
""",
        vi.OUTPUT_PROCESSOR: """
class OutputProcessor:
    def __init__(self):
        self.request_states: dict = {}
    def add_request(self, request, prompt, parent_req=None):
        pass
""",
    }
    problems = vi.missing(source.get)
    assert not [p for p in problems if "PrefixCacheStats" in p or "OutputProcessor" in p], problems
    engine = [p for p in problems if p.startswith(vi.ENGINE)]
    assert engine == [f"{vi.ENGINE}: EngineCoreRequest.{name} is gone" for name in ("priority", "sampling_params")]
    assert f"{vi.LOGGERS}: no such file" in problems


@pytest.mark.vllm
def test_the_list_matches_the_exporters_own_overrides() -> None:
    """The parameters listed for each method vLLM calls are the ones the exporter's override takes (a list that
    drifted from the code would check the wrong thing)."""
    from slokit.exporters.vllm import SlokitStatLogger

    listed = {m.name: m.params for r in vi.RELIED_ON if r.path == vi.LOGGERS for m in r.methods}
    for name, params in listed.items():
        own = tuple(inspect.signature(getattr(SlokitStatLogger, name)).parameters)
        assert own[: len(params)] == params, (name, own, params)


@pytest.mark.vllm
def test_the_exporter_says_at_start_up_what_this_vllm_lacks(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from prometheus_client import CollectorRegistry

    from bench.exporter_overhead import ENGINE_SPEC, make_vllm_config
    from slokit.exporters import vllm as exporter

    monkeypatch.setattr(exporter, "_GAPS_CHECKED", False)
    monkeypatch.setattr(vi, "installed_gaps", lambda: [f"{vi.STATS}: FinishedRequestStats.e2e_latency is gone"])
    config: Any = make_vllm_config()
    with caplog.at_level(logging.WARNING, logger=exporter._log.name):
        exporter.SlokitStatLogger(config, [0], registry=CollectorRegistry(), environ={"SLOKIT_SPEC": str(ENGINE_SPEC)})
    said = [r.getMessage() for r in caplog.records if "lacks what the exporter relies on" in r.getMessage()]
    assert len(said) == 1 and "FinishedRequestStats.e2e_latency is gone" in said[0], caplog.text


def test_a_vllm_without_stat_logger_plugins_is_told_at_start_up_and_a_newer_one_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """vLLM before 0.11 never loads the exporter; the general plugin (which every release loads) says so, naming
    the release and what to read instead. The installed vLLM has the group: nothing is said."""
    import importlib.machinery
    import importlib.metadata

    def says() -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="slokit.exporter"):
            vi.say_if_never_loaded()
        return [r.getMessage() for r in caplog.records]

    if vi.importlib.util.find_spec("vllm") is not None:
        assert says() == []
    old = tmp_path / "vllm"
    (old / "plugins").mkdir(parents=True)
    (old / "__init__.py").write_text("", encoding="utf-8")
    (old / "plugins" / "__init__.py").write_text('DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"\n', encoding="utf-8")
    spec = importlib.machinery.ModuleSpec("vllm", None, origin=str(old / "__init__.py"))
    monkeypatch.setattr(vi.importlib.util, "find_spec", lambda name: spec if name == "vllm" else None)
    monkeypatch.setattr(vi.importlib.metadata, "version", lambda dist: "0.10.2.post2")
    said = says()
    assert len(said) == 1, said
    assert "vLLM 0.10.2.post2 loads no 'vllm.stat_logger_plugins' plugins" in said[0]
    assert 'vllm: {version: "0.10"}' in said[0]
    # The group spelled in loggers.py (as 0.11 to 0.2x do) is enough.
    (old / "v1" / "metrics").mkdir(parents=True)
    (old / "v1" / "metrics" / "loggers.py").write_text('GROUP = "vllm.stat_logger_plugins"\n', encoding="utf-8")
    assert says() == []
