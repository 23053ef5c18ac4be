"""What an annotator is shown, built from stored runs: the case record (and image), a run's output as plain text,
its dialogue, and blinding (every run id, label and model name of the runs involved scrubbed from all of it).

Dialogues are read from the generic turns table: a simulated patient's reply is a turn whose payload has the one
patient-turn shape (``interaction.PatientTurn``: the ``question`` answered and the ``answer``), which every dialogue
benchmark records (a simulated patient's answers, a gatekeeper's results); older stored shapes are read too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from medeval_core import registry
from medeval_core.interaction import PatientTurn
from medeval_core.records import Case, RunConfig, RunKind, Turn
from medeval_core.settings import Settings
from medeval_core.store import RunRow, Store
from medeval_core.transcript import differential_rows, entry

HIDDEN = "[hidden]"
IMAGE_KEY = "image"
"""The payload key of a local image file: read and sent as image bytes, never shown as text, so never scrubbed."""

# Keys of a run's config and outputs whose string values name a system (model, backend, agent, judge, endpoint);
# plurals are not among them ("labels" are a classification task's diagnosis names).
_NAMING_KEYS = frozenset({"model", "backend", "agent", "judge", "judge_name", "judge_model", "base_url", "label",
                          "patient", "gatekeeper"})
_NAMING_SUFFIXES = ("_model", "_backend", "_agent", "_url")
_MAX_SECRET_CHARS = 200
# Values under those keys that are generic words, not names: scrubbing them would mangle ordinary text.
_GENERIC_VALUES = frozenset({"none", "openai", "transformers", "offline", "auto", "true", "false", "default",
                             "patient", "gatekeeper", "agent", "model", "simulator", "environment", "intake",
                             "user", "assistant", "system", "judge"})
_MIN_SECRET_CHARS = 4
# Output fields that carry the system's answer; everything else (backend descriptions, provenance, metrics) is
# left out of what an annotator sees.
ANSWER_FIELDS = ("response", "final_diagnosis", "diagnosis", "answer", "prediction", "differential")
_DIALOGUE_SKIP = frozenset({"provenance", "metrics", "inquired", "missed", "values", "positive", "defaulted", "root",
                            "code", "cost"})


class ItemError(Exception):
    """A task cannot be built from the runs given; worded for the administrator."""


class CaseView(BaseModel):
    fields: dict[str, str]
    image: str | None = None
    """A local image file shown to the annotator (served by the page, never as a path)."""


class OutputView(BaseModel):
    text: str
    dialogue: list[tuple[str, str]]


class Blinder:
    """Scrubs the names of the systems under evaluation from everything an annotator is shown."""

    def __init__(self, secrets: Iterable[str]) -> None:
        chosen = sorted({s.strip() for s in secrets
                         if _MIN_SECRET_CHARS <= len(s.strip()) <= _MAX_SECRET_CHARS and "\n" not in s
                         and s.strip().lower() not in _GENERIC_VALUES},
                        key=len, reverse=True)
        self.secrets = chosen
        self._pattern = re.compile("|".join(re.escape(s) for s in chosen), re.IGNORECASE) if chosen else None

    def text(self, value: str) -> str:
        return self._pattern.sub(HIDDEN, value) if self._pattern is not None else value

    def scrub(self, value: Any) -> Any:
        """``value`` with every secret replaced, except local image paths (served as bytes, never shown)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): v if k == IMAGE_KEY else self.scrub(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.scrub(v) for v in value]
        return value

    def leaks(self, value: Any) -> list[str]:
        """The secrets still present in what ``value`` shows (a check, used before an item is stored)."""
        blob = json.dumps(_without_images(value), default=str).lower()
        return [s for s in self.secrets if s.lower() in blob]


def _without_images(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_images(v) for k, v in value.items() if k != IMAGE_KEY}
    if isinstance(value, list | tuple):
        return [_without_images(v) for v in value]
    return value


def naming_strings(value: Any) -> set[str]:
    """The string values of naming keys anywhere in a nested config or output (only a key's own string: a naming
    key over a list or mapping of settings names no system)."""
    found: set[str] = set()
    if isinstance(value, Mapping):
        for key, inner in value.items():
            lowered = str(key).lower()
            if isinstance(inner, str) and (lowered in _NAMING_KEYS or lowered.endswith(_NAMING_SUFFIXES)):
                found.add(inner)
            else:
                found |= naming_strings(inner)
    elif isinstance(value, list | tuple):
        for inner in value:
            found |= naming_strings(inner)
    return found


def run_secrets(store: Store, run: RunRow) -> set[str]:
    """Everything that names ``run``'s system: its id, label, the naming values of its config and outputs, the
    actors of its turns, the judges of its judgements (and the same for the run it scores)."""
    secrets = {run.id, run.label, *naming_strings(run.config)}
    for result in store.results(run.id)[:50]:  # outputs of one run name its backend the same way every time
        secrets |= naming_strings(result.output)
        secrets |= {turn.actor for turn in store.turns(run.id, result.case_id, result.repetition)}
    secrets |= {name for j in store.judgements(run_id=run.id)[:50] for name in (j.judge_name, j.judge_model)}
    if run.source_run_id:
        source = store.find_run(run.source_run_id)
        if source is not None:
            secrets |= run_secrets(store, source)
    return secrets


def _model_or_agent(run: RunRow) -> str:
    params = RunConfig.model_validate(run.config).params
    return next((params[key] for key in ("model", "agent") if isinstance(params.get(key), str) and params[key]), "")


def system_name(run: RunRow) -> str:
    """The name an administrator's report gives a run's system: its model or agent, and the run id."""
    named = _model_or_agent(run)
    return f"{named} ({run.id})" if named else (f"{run.label} ({run.id})" if run.label else run.id)


def run_title(run: RunRow) -> str:
    """What the results page calls a run: its label and its model or agent (a benchmark's default label is the
    same for every model); the id only when it has neither."""
    named = _model_or_agent(run)
    parts = [run.label] if run.label else []
    if named and named not in run.label:
        parts.append(named)
    return " · ".join(parts) or run.id


def patient_system(run: RunRow) -> str:
    """The simulated patient that answered in ``run``'s dialogues, for the per-patient-system ratings."""
    params = RunConfig.model_validate(run.config).params
    named = next((params[key] for key in ("patient", "gatekeeper", "patient_mode")
                  if isinstance(params.get(key), str) and params[key]), "")
    return f"{run.benchmark} {named}".strip() if named else f"{run.benchmark} simulated patient"


def run_cases(store: Store, run: RunRow, settings: Settings) -> dict[str, Case]:
    """The cases of a stored run (a score run's are its source's), read through its benchmark's interface."""
    config = RunConfig.model_validate(run.config)
    if config.kind == RunKind.SCORE and config.source_run_id:
        config = RunConfig.model_validate(store.get_run(config.source_run_id).config)
    try:
        benchmark = registry.benchmark(config.benchmark)
        cases = benchmark.cases(benchmark.parse_params(config.params), settings)
    except Exception as exc:  # a benchmark's loaders raise their own kinds; all mean the same here
        raise ItemError(f"The cases of run {run.id} could not be read ({exc}); restore its input files and try "
                        "again.") from exc
    return {case.case_id: case for case in cases}


def _display(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple) and all(not isinstance(v, Mapping | list | tuple) for v in value):
        return ", ".join(str(v) for v in value)
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def case_view(case: Case) -> CaseView:
    fields = case.model_dump(mode="json")
    image = fields.pop("image_path", None)
    shown = {key.replace("_", " "): _display(value) for key, value in fields.items()
             if value is not None and value != "" and key != "case_id"}
    return CaseView(fields=shown, image=image if isinstance(image, str) and image and Path(image).is_file() else None)


def _differential_text(value: Any) -> str:
    if isinstance(value, Mapping):
        return "\n".join(f"{row.pathology} ({row.probability:.2f})" for row in differential_rows(value))
    return _display(value)


def answer_text(output: Mapping[str, Any]) -> str:
    """The system's answer in a stored output: its response text, diagnosis or differential."""
    parts = []
    for key in ANSWER_FIELDS:
        value = output.get(key)
        if value in (None, "", [], {}):
            continue
        text = _differential_text(value) if key == "differential" else _display(value)
        parts.append(text if key == "response" else f"{key.replace('_', ' ').capitalize()}: {text}")
    return "\n\n".join(parts)


def dialogue_lines(turns: Sequence[Turn]) -> list[tuple[str, str]]:
    """(speaker, text) lines of a stored dialogue, with no actor names (they can name the agent's model)."""
    lines: list[tuple[str, str]] = []
    for turn in turns:
        payload = turn.payload
        reply = PatientTurn.read(payload)
        if reply is not None:
            if reply.question:
                lines.append(("Question" if turn.index else "Opening question", reply.question))
            lines.append(("Patient", reply.answer))
            continue
        question = payload.get("question")
        if isinstance(question, str):
            if question:
                lines.append(("Question" if turn.index else "Opening question", question))
            continue
        if "differential" in payload or "diagnosis" in payload:
            lines.append(("Conclusion", answer_text(payload)))
            continue
        step = entry(turn.model_copy(update={"payload": {key: value for key, value in payload.items()
                                                          if key not in _DIALOGUE_SKIP}}))
        action = turn.action.replace("_", " ").capitalize()
        lines.extend((action, text) for text in (step.said, step.answer, *step.details) if text)
    return lines


def output_view(store: Store, run_id: str, case_id: str, output: Mapping[str, Any], repetition: int = 0) -> OutputView:
    return OutputView(text=answer_text(output), dialogue=dialogue_lines(store.turns(run_id, case_id, repetition)))
