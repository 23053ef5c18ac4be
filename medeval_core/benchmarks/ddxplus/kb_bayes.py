"""The KB-Bayes agent: a naive-Bayes questioner over evidence roots with a differential head learnt from patients.

Questioner. P(root present | pathology) comes from the KB's condition lists (a root a pathology does not list
gets ``epsilon``: every patient's evidence roots are in its pathology's lists) and, when training patients are
given, from their counts (Laplace-smoothed). Each turn asks the root with the largest expected information gain
about the pathology, in closed form over all roots at once; a child root (pain location, lesion colour, swelling
location) is only asked once its parent is known positive, since otherwise its answer is known to be the
default. It stops when the posterior's top pathology reaches ``confidence`` or the question limit is reached.

Differential head. The KB alone gives a poor differential (DDF1 near 31, design.md §3.2): the ground-truth
differential is learnt from training patients' ``DIFFERENTIAL_DIAGNOSIS``. After the pathology is settled, the
agent asks up to ``differential_questions`` more roots, each the one that best splits the training patients of
that pathology by their differentials, then takes the nearest training patients of the predicted pathology (on
the answered roots, age, sex and initial evidence) and keeps the pathologies at least ``vote`` of them carry,
blended with that pathology's overall frequency. The predicted pathology is always the top entry.

Without training patients the differential is the posterior itself. With ``use_kb=False`` the likelihoods come
from training patients only (the run records whether the agent read the KB).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from medeval_core.benchmarks.ddxplus.interaction import Intake
from medeval_core.benchmarks.ddxplus.kb import KnowledgeBase
from medeval_core.benchmarks.ddxplus.patients import PatientSet
from medeval_core.benchmarks.ddxplus.simulator import MAX_QUESTIONS, Answer

AGE_BANDS = (2, 6, 16, 40, 65)
_TINY = 1e-300


@dataclass(frozen=True)
class KBBayesConfig:
    confidence: float = 0.99
    max_turns: int = MAX_QUESTIONS
    differential_questions: int = 2
    neighbours: int = 7
    vote: float = 0.4
    neighbour_share: float = 0.7
    age_weight: float = 0.05
    sex_weight: float = 0.5
    initial_weight: float = 3.0
    epsilon: float = 1e-4
    use_kb: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.confidence <= 1:
            raise ValueError("confidence must be in (0, 1].")
        if not 0 <= self.max_turns <= MAX_QUESTIONS:
            raise ValueError(f"max_turns must be between 0 and {MAX_QUESTIONS}.")
        if self.neighbours < 1:
            raise ValueError("neighbours must be at least 1.")


@dataclass(frozen=True)
class Suggestion:
    """What the agent would ask next and why (for teaching on the walkthrough page)."""

    root: str | None
    question: str
    information_gain: float
    phase: str
    leading: list[tuple[str, float]]


class KBBayesAgent:
    """Fitted once (KB + optional training patients); ``start`` opens a cheap per-patient session."""

    name = "kb-bayes"

    def __init__(self, kb: KnowledgeBase, config: KBBayesConfig, theta: np.ndarray, prior: np.ndarray,
                 train: PatientSet | None) -> None:
        self.kb = kb
        self.config = config
        self.reads_kb = config.use_kb
        self.log_theta = np.log(theta)
        self.log_not_theta = np.log1p(-theta)
        self.theta = theta
        self.not_theta = 1.0 - theta
        # Sums over pathologies of p·θ·log θ appear in every expected entropy; precompute the θ-only parts.
        self.theta_log_theta = theta * self.log_theta
        self.not_theta_log_not_theta = self.not_theta * self.log_not_theta
        self.log_prior = np.log(prior)
        self.root_parent = kb.root_parent
        self.item_root = kb.item_root
        self.train = train
        if train is not None and len(train):
            nondefault = ~kb.item_is_default
            self.train_items = train.item_matrix() & nondefault[None, :]
            self.train_present = train.present
            self.train_sets = train.differential > 0.01
            self.train_masses = train.differential
            self.train_pathology = train.pathology
            self.train_age = train.age.astype(np.float64)
            self.train_female = train.sex == "F"
            self.train_initial = train.initial_root
            counts = np.bincount(train.pathology, minlength=kb.n_pathologies).astype(np.float64)
            sums = np.zeros((kb.n_pathologies, kb.n_pathologies))
            np.add.at(sums, train.pathology, self.train_sets.astype(np.float64))
            self.set_frequency = sums / np.maximum(counts, 1.0)[:, None]
            self.by_pathology = [np.flatnonzero(train.pathology == k) for k in range(kb.n_pathologies)]
            self.split_gain = np.vstack([_split_gain(self.train_present[m], self.train_sets[m])
                                         for m in self.by_pathology])
        else:
            self.train = None

    @classmethod
    def fit(cls, kb: KnowledgeBase, train: PatientSet | None = None,
            config: KBBayesConfig | None = None) -> KBBayesAgent:
        config = config or KBBayesConfig()
        k, r = kb.n_pathologies, kb.n_roots
        listed = kb.condition_roots
        if train is not None and len(train):
            counts = np.bincount(train.pathology, minlength=k).astype(np.float64)
            present = np.zeros((k, r))
            np.add.at(present, train.pathology, train.present.astype(np.float64))
            prior = (counts + 1.0) / (counts.sum() + k)
            if config.use_kb:
                theta = np.where(listed, (present + 1.0) / (counts[:, None] + 2.0), config.epsilon)
            else:
                overall = (present.sum(axis=0) + 1.0) / (counts.sum() + 2.0)
                theta = (present + overall[None, :]) / (counts[:, None] + 1.0)
        else:
            if not config.use_kb:
                raise ValueError("Without the KB the agent needs training patients to learn from.")
            prior = np.full(k, 1.0 / k)
            theta = np.where(listed, 0.5, config.epsilon)
        theta = np.clip(theta, config.epsilon, 1.0 - config.epsilon)
        return cls(kb, config, theta, prior, train)

    def params(self) -> dict[str, object]:
        """What a run records: the configuration, whether the KB was read, and how much it learnt from."""
        return {**asdict(self.config), "reads_kb": self.reads_kb,
                "training_patients": 0 if self.train is None else len(self.train)}

    def start(self, intake: Intake) -> KBBayesSession:
        return KBBayesSession(self, intake)

    def replay(self, intake: Intake, answers: list[Answer]) -> KBBayesSession:
        """A session that has seen ``answers`` (asked by anyone, e.g. a person on the walkthrough page)."""
        session = self.start(intake)
        for answer in answers:
            session.observe(answer)
            session.asked += 1
        return session


class KBBayesSession:
    def __init__(self, agent: KBBayesAgent, intake: Intake) -> None:
        self.agent = agent
        kb = agent.kb
        self.intake = intake
        self.log_post = agent.log_prior.copy()
        self.known = np.zeros(kb.n_roots, dtype=bool)
        self.positive = np.zeros(kb.n_roots, dtype=bool)
        self.items = np.zeros(len(kb.items), dtype=bool)
        self.asked = 0
        self.differential_asked = 0
        initial = kb.root_index[intake.initial_evidence]
        self._update(initial, True, (kb.item_index.get(intake.initial_evidence),))

    # Beliefs -------------------------------------------------------------------------------------------------

    def posterior(self) -> np.ndarray:
        shifted = np.exp(self.log_post - self.log_post.max())
        return shifted / shifted.sum()

    def _update(self, root: int, positive: bool, items: tuple[int | None, ...]) -> None:
        agent = self.agent
        self.log_post += agent.log_theta[:, root] if positive else agent.log_not_theta[:, root]
        self.known[root] = True
        self.positive[root] = positive
        for item in items:
            if item is not None and not agent.kb.item_is_default[item]:
                self.items[item] = True

    def observe(self, answer: Answer) -> None:
        kb = self.agent.kb
        self._update(kb.root_index[answer.root], answer.positive,
                     tuple(kb.item_index.get(item) for item in answer.items()))

    # Questions -----------------------------------------------------------------------------------------------

    def _askable(self) -> np.ndarray:
        parent = self.agent.root_parent
        return ~self.known & ((parent < 0) | self.positive[np.maximum(parent, 0)])

    def _information_gain(self, p: np.ndarray) -> np.ndarray:
        """Expected entropy reduction of the pathology posterior for every root's yes/no answer."""
        agent = self.agent
        p_log_p = p * np.log(np.maximum(p, _TINY))
        yes = np.clip(p @ agent.theta, _TINY, 1.0)
        no = np.clip(1.0 - yes, _TINY, 1.0)
        # sum_k a_k log a_k with a = p*θ, written as two mat-vecs; then H = log(mass) - S / mass.
        s_yes = p_log_p @ agent.theta + p @ agent.theta_log_theta
        s_no = p_log_p @ agent.not_theta + p @ agent.not_theta_log_not_theta
        h_yes = np.log(yes) - s_yes / yes
        h_no = np.log(no) - s_no / no
        return -p_log_p.sum() - yes * h_yes - no * h_no

    def _choose(self) -> tuple[int | None, float, str]:
        config = self.agent.config
        if self.asked >= config.max_turns:
            return None, 0.0, "limit"
        p = self.posterior()
        askable = self._askable()
        if p.max() < config.confidence:
            gain = np.where(askable, self._information_gain(p), -np.inf)
            root = int(np.argmax(gain))
            return (root, float(gain[root]), "pathology") if np.isfinite(gain[root]) else (None, 0.0, "exhausted")
        if self.agent.train is None or self.differential_asked >= config.differential_questions:
            return None, 0.0, "confident"
        top = int(np.argmax(p))
        if len(self.agent.by_pathology[top]) < 2:
            return None, 0.0, "confident"
        gain = np.where(askable, self.agent.split_gain[top], -np.inf)
        root = int(np.argmax(gain))
        if not gain[root] > 1e-12:
            return None, 0.0, "confident"
        return root, float(gain[root]), "differential"

    def next_question(self) -> str | None:
        root, _, phase = self._choose()
        if root is None:
            return None
        self.asked += 1
        if phase == "differential":
            self.differential_asked += 1
        return self.agent.kb.roots[root]

    def suggest(self) -> Suggestion:
        """The next question without asking it, with the leading pathologies (for the walkthrough page)."""
        kb = self.agent.kb
        root, gain, phase = self._choose()
        p = self.posterior()
        leading = [(kb.pathology_names[k], float(p[k])) for k in np.argsort(-p, kind="stable")[:5]]
        question = kb.question_text(kb.roots[root]) if root is not None else ""
        return Suggestion(root=kb.roots[root] if root is not None else None, question=question,
                          information_gain=gain, phase=phase, leading=leading)

    # Differential --------------------------------------------------------------------------------------------

    def differential(self) -> dict[str, float]:
        kb = self.agent.kb
        p = self.posterior()
        top = int(np.argmax(p))
        if self.agent.train is None:
            order = np.argsort(-p, kind="stable")
            return {kb.pathology_names[k]: float(p[k]) for k in order if p[k] > 0}
        share, mass = self._neighbour_vote(top)
        members = np.flatnonzero(share >= self.agent.config.vote)
        return _masses(kb.pathology_names, top, members, mass)

    def _neighbour_vote(self, top: int) -> tuple[np.ndarray, np.ndarray]:
        agent = self.agent
        config = agent.config
        known_items = self.known[agent.item_root]
        distance = (agent.train_items[:, known_items] != self.items[known_items]).sum(axis=1).astype(np.float64)
        distance += config.age_weight * np.abs(agent.train_age - self.intake.age)
        distance += config.sex_weight * (agent.train_female != (self.intake.sex == "F"))
        distance += config.initial_weight * (agent.train_initial != agent.kb.root_index[self.intake.initial_evidence])
        # Patients of another pathology only fill in when the predicted one has too few training patients.
        distance += 1e6 * (agent.train_pathology != top)
        nearest = np.argsort(distance, kind="stable")[: config.neighbours]
        frequency = agent.set_frequency[top] if len(agent.by_pathology[top]) else agent.train_sets[nearest].mean(0)
        share = (config.neighbour_share * agent.train_sets[nearest].mean(axis=0)
                 + (1 - config.neighbour_share) * frequency)
        return share, agent.train_masses[nearest].mean(axis=0)


def _split_gain(present: np.ndarray, sets: np.ndarray) -> np.ndarray:
    """How well each root splits patients by their differential sets: the Gini impurity it removes, summed over
    pathologies. Zero for every root when there are fewer than two patients."""
    n = len(present)
    if n < 2:
        return np.zeros(present.shape[1])
    labels = sets.astype(np.float64)
    x = present.astype(np.float64)
    n1 = x.sum(axis=0)
    n0 = n - n1
    s1 = x.T @ labels
    s0 = labels.sum(axis=0)[None, :] - s1
    mean = labels.mean(axis=0)
    total = (mean * (1 - mean)).sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        f1 = np.where(n1[:, None] > 0, s1 / n1[:, None], 0.0)
        f0 = np.where(n0[:, None] > 0, s0 / n0[:, None], 0.0)
    after = (n1 * (f1 * (1 - f1)).sum(axis=1) + n0 * (f0 * (1 - f0)).sum(axis=1)) / n
    return total - after


MAX_SET = 30
_FLOOR = 0.1


def _masses(names: list[str], top: int, members: np.ndarray, mass: np.ndarray) -> dict[str, float]:
    """Masses for a chosen set: half on the predicted pathology, half shared by mass (plus a floor).

    With at most MAX_SET members and the floor, every member keeps more than 0.0125 (above the 0.01 threshold),
    and the predicted pathology is the unique top.
    """
    others = sorted((int(k) for k in members if k != top), key=lambda k: -mass[k])
    chosen = [top, *others[: MAX_SET - 1]]
    weights = np.maximum(mass[chosen], 0.0)
    weights = weights / max(1.0, float(weights.sum())) + _FLOOR
    share = 0.5 * weights / weights.sum()
    share[0] += 0.5
    return {names[k]: float(m) for k, m in zip(chosen, share, strict=True)}

