"""DDXPlus agents end to end: the KB-Bayes questioner and its differential head on a held-out split."""

from __future__ import annotations

import math

import numpy as np
import pytest

from medeval_core.benchmarks.ddxplus.interaction import Consultation, OfflineContext, consult
from medeval_core.benchmarks.ddxplus.kb import load_kb
from medeval_core.benchmarks.ddxplus.kb_bayes import KBBayesAgent, KBBayesConfig
from medeval_core.benchmarks.ddxplus.patients import load_patients
from medeval_core.benchmarks.ddxplus.scoring import PredictionBuilder, score
from tests.ddxplus_fixtures import ddxplus_dir, sample_csv


@pytest.fixture(scope="module")
def kb():
    return load_kb(ddxplus_dir())


@pytest.fixture(scope="module")
def split(kb):
    patients = load_patients(sample_csv(), kb)
    order = np.random.default_rng(0).permutation(len(patients))
    cut = int(0.7 * len(patients))
    return patients.subset(order[:cut]), patients.subset(order[cut:])


def _evaluate(agent, patients):
    builder = PredictionBuilder(patients)
    episodes = []
    for i, case in enumerate(patients.cases()):
        episode = consult(agent, patients.kb, case, OfflineContext(case.case_id))
        result = episode.output()
        builder.add(i, result.differential.items(), result.inquired)
        episodes.append(episode)
    return score(patients, builder.build()).metrics, episodes


def test_information_gain_closed_form_matches_the_definition(kb, split):
    agent = KBBayesAgent.fit(kb, split[0])
    session = agent.start(Consultation(kb, split[1].patient(0)).intake())
    p = session.posterior()
    gains = session._information_gain(p)

    def entropy(q):
        return -sum(x * math.log(x) for x in q if x > 0)

    for root in (0, 17, 90, 200):
        theta = agent.theta[:, root]
        yes = float(p @ theta)
        slow = entropy(p) - yes * entropy(p * theta / yes) - (1 - yes) * entropy(p * (1 - theta) / (1 - yes))
        assert gains[root] == pytest.approx(slow, abs=1e-9)


def test_trained_agent_meets_the_targets_on_held_out_patients(kb, split):
    train, test = split
    agent = KBBayesAgent.fit(kb, train)
    metrics, episodes = _evaluate(agent, test)
    assert metrics["GTPA@1"] >= 95.0
    assert metrics["IL"] <= 12.0
    assert metrics["DDF1"] >= 70.0
    for episode in episodes:
        asked_positive = {episode.patient.initial_evidence}
        for root, answer in zip(episode.asked, episode.answers, strict=True):
            parent = kb.evidences[root].parent
            # A child root is only asked once its parent is known positive.
            assert parent is None or parent in asked_positive, (episode.patient.case_id, root)
            if answer.positive:
                asked_positive.add(root)
        assert len(set(episode.asked)) == len(episode.asked)  # never the same root twice
        differential = episode.verdict.differential
        top = max(differential, key=differential.get)
        assert all(mass > 0.01 for mass in differential.values())
        assert sorted(differential.values()).count(differential[top]) == 1


def test_kb_only_agent_finds_the_pathology_but_not_the_differential(kb, split):
    agent = KBBayesAgent.fit(kb, None)
    assert agent.reads_kb and agent.params()["training_patients"] == 0
    metrics, _ = _evaluate(agent, split[1])
    assert metrics["GTPA@1"] >= 95.0
    assert metrics["DDF1"] < 50.0  # design.md §3.2: the KB alone gives a DDF1 near 31


def test_agent_without_the_kb_records_it_and_needs_training_patients(kb, split):
    with pytest.raises(ValueError, match="needs training patients"):
        KBBayesAgent.fit(kb, None, KBBayesConfig(use_kb=False))
    agent = KBBayesAgent.fit(kb, split[0], KBBayesConfig(use_kb=False))
    assert agent.params()["reads_kb"] is False


def test_stops_at_the_confidence_threshold_or_the_limit(kb, split):
    strict = KBBayesAgent.fit(kb, split[0], KBBayesConfig(confidence=1.0, max_turns=5, differential_questions=0))
    assert len(consult(strict, kb, split[1].patient(3), OfflineContext()).output().inquired) == 5
    loose = KBBayesAgent.fit(kb, split[0], KBBayesConfig(confidence=0.5, differential_questions=0))
    episode = Consultation(kb, split[1].patient(3))
    session = loose.start(episode.intake())
    while (code := session.next_question()) is not None:
        session.observe(episode.ask(code).as_answer())
    assert session.posterior().max() >= 0.5


def test_a_run_stored_with_max_questions_keeps_its_agents_budget_as_max_turns(kb, split):
    from medeval_core.benchmarks.ddxplus.benchmark import build_agent
    from medeval_core.settings import load_settings

    old = build_agent("kb-bayes", kb, split[0], load_settings(), {"confidence": 1.0, "max_questions": 4,
                                                                  "differential_questions": 0})
    assert old.params()["max_turns"] == 4 and "max_questions" not in old.params()
    assert len(consult(old, kb, split[1].patient(3), OfflineContext()).output().inquired) == 4


def test_suggestion_matches_the_next_question_after_a_person_asked(kb, split):
    agent = KBBayesAgent.fit(kb, split[0])
    episode = Consultation(kb, split[1].patient(5))
    episode.ask("E_91")
    episode.ask("E_53")
    session = agent.replay(episode.intake(), episode.answers)
    suggestion = session.suggest()
    assert suggestion.root == session.next_question()
    assert suggestion.root not in {"E_91", "E_53"}
    assert suggestion.question == kb.question_text(suggestion.root)
    assert len(suggestion.leading) == 5 and suggestion.leading[0][1] >= suggestion.leading[1][1]


def test_ddxplus_params_stored_with_max_questions_read_as_max_turns():
    from medeval_core.benchmarks.ddxplus.params import DDXPlusParams

    old = DDXPlusParams.model_validate({"patients": "/p.csv", "kb": "/kb", "agent": "kb-bayes",
                                        "agent_params": {"confidence": 1.0, "max_questions": 4}})
    assert old.agent_params == {"confidence": 1.0, "max_turns": 4}
