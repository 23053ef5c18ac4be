"""One open-diagnosis consultation as an ``Environment`` of the core episode: the doctor sees the chief complaint
(and the source's objective for the doctor), asks the record's patient or requests a test (each a turn, 10 by
default; a question that starts "REQUEST TEST:" goes to the test channel, as in AgentClinic, and is answered from
the measurements, never by the patient), then gives up to 10 ranked diagnoses, which are
mapped to ICD-9 (codes pass through; names through the mapper; a person may correct a mapping) and scored with
Hit@K / Rec@K on the categories (``medeval_core.vocabularies.icd9.category``,
``medeval_core.benchmarks.dynamicare.hitk``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from medeval_core.benchmark import CaseContext
from medeval_core.benchmarks.dynamicare.cases import PatientRecord
from medeval_core.benchmarks.dynamicare.doctors import MAX_DIAGNOSES, Doctor, DoctorView
from medeval_core.benchmarks.dynamicare.hitk import KS, case_metrics, matched
from medeval_core.benchmarks.dynamicare.patients import MeasurementReader
from medeval_core.dialogue import Patient, Reply
from medeval_core.interaction import Episode, EpisodeError, Limits, Step
from medeval_core.vocabularies.icd9 import Icd9Mapper, Icd9Mapping, category, lookup, normalise_code

DEFAULT_MAX_QUESTIONS = 10
START_ACTOR = "patient"
TEST_REQUEST = re.compile(r"^\s*REQUEST\s+TESTS?\s*:\s*", re.IGNORECASE)
"""AgentClinic's doctor asks for results with "REQUEST TEST: [test]"; its measurement agent answers them."""


def requested_test(question: str) -> str | None:
    """The test named by a "REQUEST TEST: ..." question, or None for a question to the patient."""
    found = TEST_REQUEST.match(question)
    return question[found.end():].strip() if found else None


class Ask(BaseModel):
    kind: Literal["question"] = "question"
    text: str
    notes: dict[str, Any] = Field(default_factory=dict)


class Diagnose(BaseModel):
    kind: Literal["diagnosis"] = "diagnosis"
    diagnoses: list[str]
    corrections: dict[str, str] = Field(default_factory=dict)
    """Diagnosis name -> the ICD-9 code a person chose instead of the mapper's."""
    forced: bool = False
    notes: dict[str, Any] = Field(default_factory=dict)


class Intake(BaseModel):
    complaint: str
    objective: str = ""


class MappedDiagnosis(BaseModel):
    rank: int
    text: str
    code: str | None
    category: str | None
    description: str = ""
    confidence: float = 0.0
    method: str


class Verdict(BaseModel):
    diagnoses: list[MappedDiagnosis]
    metrics: dict[str, float]
    matched: dict[str, list[str]]
    truth_categories: list[str]
    forced: bool


class DynamicareOutput(BaseModel):
    case_id: str
    diagnoses: list[MappedDiagnosis]
    truth_codes: list[str]
    truth_categories: list[str]
    metrics: dict[str, float]
    matched: dict[str, list[str]]
    questions: list[str]
    answers: list[str]
    num_questions: int
    timed_out: bool


def mapped_diagnoses(names: list[str], mapper: Icd9Mapper,
                     corrections: Mapping[str, str] | None = None) -> list[MappedDiagnosis]:
    """Each ranked name with its code; a correction (a code) replaces the mapper's choice for that name."""
    rows: list[MappedDiagnosis] = []
    for rank, name in enumerate(names, start=1):
        fixed = (corrections or {}).get(name)
        if fixed is not None:
            code = normalise_code(fixed)
            if code is None:
                raise EpisodeError(f"{fixed!r} is not an ICD-9 code (e.g. 428.0, E815.0, V45.1); correct it.")
            entry = lookup(code)
            rows.append(MappedDiagnosis(rank=rank, text=name, code=code, category=category(code),
                                        description=entry.description if entry else "", confidence=1.0,
                                        method="corrected"))
            continue
        mapping: Icd9Mapping = mapper.map(name)
        rows.append(MappedDiagnosis(rank=rank, text=mapping.text, code=mapping.code, category=mapping.category,
                                    description=mapping.description, confidence=mapping.confidence,
                                    method=mapping.method))
    return rows


def verdict_of(record: PatientRecord, diagnoses: list[MappedDiagnosis], forced: bool = False) -> Verdict:
    predicted = [row.category for row in diagnoses]
    truth = record.categories
    return Verdict(diagnoses=diagnoses, metrics=case_metrics(predicted, truth), truth_categories=truth,
                   matched={f"@{k}": matched(predicted, truth, k) for k in KS}, forced=forced)


class Consultation:
    def __init__(self, record: PatientRecord, patient: Patient, mapper: Icd9Mapper,
                 ctx: CaseContext | None = None, max_turns: int = DEFAULT_MAX_QUESTIONS,
                 measurements: Patient | None = None) -> None:
        self.record = record
        self.patient = patient
        self._measurements = measurements
        self.mapper = mapper
        self.ctx = ctx
        self.max_turns = max_turns
        self.replies: list[Reply] = []
        self.verdict: Verdict | None = None

    @property
    def measurements(self) -> Patient:
        """The test channel, built at the first test request (its encoder index costs time)."""
        if self._measurements is None:
            self._measurements = MeasurementReader(self.record)
        return self._measurements

    def start(self) -> Intake:
        return Intake(complaint=self.record.chief_complaint, objective=self.record.objective)

    def counts_as_turn(self, action: Ask | Diagnose) -> bool:
        return isinstance(action, Ask)

    def describe(self, action: Ask | Diagnose) -> tuple[str, dict[str, Any]]:
        if isinstance(action, Ask):
            return "question", {"notes": action.notes} if action.notes else {}
        return "diagnosis", {"submitted": action.diagnoses, "corrections": action.corrections,
                             "forced": action.forced, **({"notes": action.notes} if action.notes else {})}

    def step(self, action: Ask | Diagnose) -> Step[Any]:
        if self.verdict is not None:
            raise EpisodeError("This case already has its diagnoses.")
        if isinstance(action, Ask):
            question = " ".join(action.text.split())
            if not question:
                raise EpisodeError("Write a question for the patient first.")
            test = requested_test(question)
            if test is not None and not test:
                raise EpisodeError('Name the test after "REQUEST TEST:" (e.g. REQUEST TEST: Chest X-ray).')
            answerer = self.patient if test is None else self.measurements
            answer = answerer.answer(question if test is None else test, self.ctx)
            reply = Reply.of(question, answer)
            self.replies.append(reply)
            return Step(observation=reply, provenance={"patient": answerer.name, "fields": reply.facts,
                                                       "refused": reply.refused,
                                                       "channel": "patient" if test is None else "test"})
        if isinstance(action, Diagnose):
            names = list(dict.fromkeys(" ".join(name.split()) for name in action.diagnoses if name.strip()))
            if not names:
                raise EpisodeError("Give at least one diagnosis.")
            if len(names) > MAX_DIAGNOSES:
                raise EpisodeError(f"Give at most {MAX_DIAGNOSES} diagnoses, most likely first.")
            self.verdict = verdict_of(self.record, mapped_diagnoses(names, self.mapper, action.corrections),
                                      forced=action.forced)
            return Step(observation=self.verdict, done=True)
        raise EpisodeError(f"An open-diagnosis action is a question or a diagnosis, not {type(action).__name__}.")

    def view(self) -> DoctorView:
        return DoctorView(complaint=self.record.chief_complaint, objective=self.record.objective,
                          history=[(r.question, r.answer) for r in self.replies],
                          questions_left=self.max_turns - len(self.replies))

    def output(self) -> DynamicareOutput:
        if self.verdict is None:
            raise EpisodeError("The case has no diagnoses yet.")
        return DynamicareOutput(
            case_id=self.record.case_id, diagnoses=self.verdict.diagnoses,
            truth_codes=[code.code for code in self.record.icd9], truth_categories=self.verdict.truth_categories,
            metrics=self.verdict.metrics, matched=self.verdict.matched, questions=[r.question for r in self.replies],
            answers=[r.answer for r in self.replies], num_questions=len(self.replies), timed_out=self.verdict.forced)


def open_episode(consultation: Consultation, ctx: CaseContext, record_start: bool = True) -> Episode[Any, Any]:
    return Episode(consultation, ctx, Limits(max_turns=consultation.max_turns), start_actor=START_ACTOR,
                   record_start=record_start)


def consult(doctor: Doctor, record: PatientRecord, patient: Patient, mapper: Icd9Mapper, ctx: CaseContext,
            max_turns: int = DEFAULT_MAX_QUESTIONS) -> DynamicareOutput:
    consultation = Consultation(record, patient, mapper, ctx, max_turns)
    episode = open_episode(consultation, ctx)
    while not episode.done:
        view = consultation.view()
        if view.questions_left <= 0:
            episode.act(Diagnose(diagnoses=doctor.diagnose(view, ctx), forced=True), actor=doctor.name)
            break
        decision = doctor.decide(view, ctx)
        if decision.kind == "question":
            episode.act(Ask(text=decision.text, notes=decision.notes), actor=doctor.name)
        else:
            episode.act(Diagnose(diagnoses=decision.diagnoses, notes=decision.notes), actor=doctor.name)
    return consultation.output()
