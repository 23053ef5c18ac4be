"""The simulated patient's answers and the shared consultation loop."""

from __future__ import annotations

import pytest

from medeval_core.benchmarks.ddxplus.interaction import (
    Ask,
    Consultation,
    Diagnose,
    EpisodeError,
    OfflineContext,
    consult,
    open_episode,
)
from medeval_core.benchmarks.ddxplus.kb import load_kb
from medeval_core.benchmarks.ddxplus.patients import DDXPlusPatient
from medeval_core.benchmarks.ddxplus.simulator import MAX_QUESTIONS, PatientSimulator
from tests.ddxplus_fixtures import ddxplus_dir


@pytest.fixture(scope="module")
def kb():
    return load_kb(ddxplus_dir())


def _patient(evidences, initial="E_91", pathology="Pneumonia", differential=(("Pneumonia", 0.6), ("URTI", 0.4))):
    return DDXPlusPatient(case_id="row-7", row=7, age=44, sex="F", pathology=pathology, initial_evidence=initial,
                          evidences=tuple(evidences), differential=tuple(differential))


PAINFUL = ["E_91", "E_53", "E_55_@_V_89", "E_55_@_V_62", "E_54_@_V_161", "E_56_@_7", "E_57_@_V_123",
           "E_204_@_V_10"]


def test_binary_answers(kb):
    sim = PatientSimulator(kb, _patient(PAINFUL))
    fever = sim.answer("E_91")
    assert (fever.positive, fever.values, fever.defaulted, fever.text(kb)) == (True, (), False, "Yes")
    cough = sim.answer("E_201")
    assert (cough.positive, cough.defaulted, cough.text(kb), cough.text(kb, "fr")) == (False, True, "No", "Non")
    assert cough.items() == () and fever.items() == ("E_91",)


def test_multi_choice_root_reveals_the_whole_value_set(kb):
    sim = PatientSimulator(kb, _patient(PAINFUL))
    where = sim.answer("E_55")
    assert where.values == ("V_89", "V_62") and where.positive
    assert where.text(kb) == "forehead, top of the head"
    assert where.items() == ("E_55_@_V_89", "E_55_@_V_62")
    # Asking with an item code asks its root.
    assert sim.answer("E_55_@_V_14") == where
    assert sim.answer("E_56").text(kb) == "7/10"


def test_defaults_are_answered_and_are_not_positive(kb):
    sim = PatientSimulator(kb, _patient(PAINFUL))
    radiates = sim.answer("E_57")  # listed with its default value only
    assert (radiates.values, radiates.positive, radiates.defaulted) == (("V_123",), False, False)
    travel = sim.answer("E_204")
    assert (travel.values, travel.positive, travel.text(kb)) == (("V_10",), False, "no")
    speed = sim.answer("E_59")  # not listed: the default scale value
    assert (speed.values, speed.positive, speed.defaulted) == (("0",), False, True)


def test_children_default_when_the_parent_is_absent(kb):
    # The file lists a pain location but no pain (E_53): the child answers its default.
    sim = PatientSimulator(kb, _patient(["E_91", "E_55_@_V_89", "E_130_@_V_157"]))
    assert sim.answer("E_53").positive is False
    where = sim.answer("E_55")
    assert (where.values, where.positive, where.defaulted) == (("V_123",), False, True)
    colour = sim.answer("E_130")
    assert (colour.values, colour.defaulted) == (("V_11",), True)


def test_unknown_code_raises(kb):
    with pytest.raises(KeyError, match="not an evidence"):
        PatientSimulator(kb, _patient(PAINFUL)).answer("E_0000")


def _episode(kb, patient):
    consultation = Consultation(kb, patient)
    ctx = OfflineContext(case_id=patient.case_id)
    return consultation, open_episode(consultation, ctx), ctx


def test_episode_turns_limit_and_metrics(kb):
    consultation, episode, ctx = _episode(kb, _patient(PAINFUL))
    assert consultation.intake().initial_question.startswith("Do you have a fever")
    episode.act(Ask(code="E_53"), actor="person")
    episode.act(Ask(code="E_55_@_V_89"), actor="person")
    episode.act(Ask(code="E_53"), actor="person")  # a repeat is a turn too
    with pytest.raises(EpisodeError, match="not an evidence code"):
        episode.act(Ask(code="fever?"), actor="person")
    step = episode.act(Diagnose(differential={"Pneumonia": 0.7, "URTI": 0.2, "Bronchitis": 0.1}), actor="person")
    assert step.done
    metrics = step.observation.metrics
    # present {E_91, E_53, E_55, E_54, E_56}; inquired {E_91, E_53, E_55}
    assert metrics["PER"] == pytest.approx(60.0)
    assert metrics["IL"] == 4.0
    assert metrics["GTPA@1"] == 100.0
    assert metrics["DDR"] == 100.0 and metrics["DDP"] == pytest.approx(200 / 3)
    assert step.observation.missed == ["E_54", "E_56"]
    output = consultation.output()
    assert output.inquired == ["E_53", "E_55", "E_53"] and output.index == 7
    turns = ctx.turns
    assert [t.action for t in turns] == ["intake", "ask", "ask", "ask", "differential"]
    assert [t.index for t in turns] == [0, 1, 2, 3, 4]
    assert turns[2].payload["root"] == "E_55" and turns[2].payload["answer"] == "forehead, top of the head"
    with pytest.raises(EpisodeError, match="finished"):
        episode.act(Ask(code="E_91"), actor="person")


def test_question_limit_is_thirty(kb):
    _, episode, _ = _episode(kb, _patient(PAINFUL))
    for _ in range(MAX_QUESTIONS):
        episode.act(Ask(code="E_201"), actor="person")
    with pytest.raises(EpisodeError, match="30-turn limit"):
        episode.act(Ask(code="E_201"), actor="person")
    assert episode.act(Diagnose(differential={}), actor="person").observation.metrics["IL"] == 31.0


def test_invalid_differentials_are_refused(kb):
    _, episode, _ = _episode(kb, _patient(PAINFUL))
    with pytest.raises(EpisodeError, match="not one of the 49"):
        episode.act(Diagnose(differential={"Flu-ish": 1.0}), actor="person")
    with pytest.raises(EpisodeError, match="finite numbers"):
        episode.act(Diagnose(differential={"URTI": -1}), actor="person")
    assert not episode.done
    step = episode.act(Diagnose(differential=[["IVRS ou virémie", 1.0]]), actor="person")
    assert step.observation.differential == {"URTI": 1.0}


def test_state_restores_a_half_done_consultation(kb):
    consultation, episode, ctx = _episode(kb, _patient(PAINFUL))
    episode.act(Ask(code="E_53"), actor="person")
    episode.act(Ask(code="E_55"), actor="person")
    again = Consultation(kb, consultation.patient)
    replayed = open_episode(again, ctx, record_intake=False)
    replayed.restore([(t.actor, Ask(code=t.payload["root"])) for t in ctx.turns if t.action == "ask"])
    assert again.asked == ["E_53", "E_55"] and again.answers == consultation.answers
    assert len(ctx.turns) == 3  # replayed questions are not recorded again
    assert replayed.turns_left == MAX_QUESTIONS - 2


class _Scripted:
    name = "scripted"
    reads_kb = False

    def __init__(self, questions):
        self.questions = questions

    def start(self, intake):
        questions = iter(self.questions)
        seen = []

        class Session:
            def next_question(self):
                return next(questions, None)

            def observe(self, answer):
                seen.append(answer)

            def differential(self):
                return {"Pneumonia": 1.0} if any(a.positive for a in seen) else {"URTI": 1.0}

        return Session()


def test_consult_stops_at_none_or_the_limit(kb):
    patient = _patient(PAINFUL)
    short = consult(_Scripted(["E_53", "E_201"]), kb, patient, OfflineContext()).output()
    assert short.inquired == ["E_53", "E_201"] and short.differential == {"Pneumonia": 1.0}
    ctx = OfflineContext()
    endless = consult(_Scripted(["E_201"] * 100), kb, patient, ctx).output()
    assert len(endless.inquired) == MAX_QUESTIONS and endless.differential == {"URTI": 1.0}
    assert len(ctx.turns) == MAX_QUESTIONS + 2 and ctx.turns[0].action == "intake"
    assert {t.actor for t in ctx.turns[1:]} == {"scripted"}
