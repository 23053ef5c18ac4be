"""The offline MEDIQ patient (fact-select, all-MiniLM-L6-v2) on the shared iMedQA sample: replies per second against
the encoder alone on the same texts.

Every case gets ``--questions`` questions (default 10): most are built from the case's own facts ("Can you tell me
about ...?", so some match and some do not), the rest from a short list of general history questions that recur
across cases, as an expert's do. Two ways of asking:

- replay: the questions are known when the case starts (``run mediq --expert replay``), so the patient encodes them
  with the facts in one call (``FactSelectPatient.prepare``) and then answers each;
- interactive: one question at a time (an LLM expert or a person): the facts go with the first question, every
  later question is its own encoder call unless it was seen before.

Each round times, one after the other, each way through the patient (a new ``FactSelectPatient`` per case, the
remembered vectors cleared first) and its baselines, the encoders alone (``ENCODERS``) on the same texts in the same
calls (one call of facts and questions per case; or facts with the first question, then each question alone), at
the same thread count (one), with no cache. Prints replies/s (min and median over the rounds), the ratio patient /
encoder alone (about 1.0: the patient adds nothing to the encoder it calls) and patient / torch encoder alone (the
wheel's model through sentence-transformers, the encoder before the ONNX graph, same calls and thread), the CPU time
per reply (what a shared machine's load does not change), and the fixed cost of the first case (loading the
encoder). Target: replay >= 50
replies/s.

Run: MEDEVAL_DATA_DIR=../shared/data .venv/bin/python bench/mediq_patient_bench.py [--cases 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from medeval_core.benchmarks.mediq.cases import MediqCase, load_cases  # noqa: E402
from medeval_core.benchmarks.mediq.patients import FactSelectPatient  # noqa: E402
from medeval_core.settings import default_data_dir  # noqa: E402

TARGET_REPLIES_PER_S = 50.0
GENERAL_QUESTIONS = [
    "How long have you had these symptoms?", "Do you have a fever?", "Are you taking any medications?",
    "Do you have any allergies?", "Does anyone in your family have a similar illness?", "Do you smoke?",
    "Have you travelled recently?", "Have you lost weight?", "Do you have any pain?", "Is the pain constant?",
]


def questions_for(case: MediqCase, number: int, case_number: int) -> list[str]:
    """``number`` questions: about 70 % from the case's facts (their first words), the rest general ones."""
    from_facts = [f"Can you tell me about {' '.join(re.findall(r'[A-Za-z0-9/-]+', fact)[:6]).lower()}?"
                  for fact in case.facts]
    general = [GENERAL_QUESTIONS[(case_number + k) % len(GENERAL_QUESTIONS)] for k in range(number)]
    wanted_from_facts = min(len(from_facts), round(number * 0.7))
    return (from_facts[:wanted_from_facts] + general)[:number]


def patient_pass(cases: list[MediqCase], questions: list[list[str]], replay: bool) -> int:
    from medeval_core.models.embeddings import forget_remembered

    forget_remembered()
    replies = 0
    for case, asked in zip(cases, questions, strict=True):
        patient = FactSelectPatient(case)
        if replay:
            patient.prepare(asked)
        for question in asked:
            patient.answer(question)
            replies += 1
    return replies


def onnx_encoder() -> Callable[[list[str]], object]:
    """medeval's encoder (``embeddings.encode``: the ONNX graph under onnxruntime) without the patient's memo."""
    from medeval_core.models.embeddings import encode

    return encode


def torch_encoder() -> Callable[[list[str]], object]:
    """The encoder before issue 20's ONNX graph: the wheel's model through ``SentenceTransformer.encode`` (torch)."""
    import torch

    from medeval_core.models.embeddings import _sentence_transformer

    encoder = _sentence_transformer()
    torch.set_num_threads(1)

    def run(texts: list[str]) -> object:
        with torch.inference_mode():
            return encoder.encode(texts, normalize_embeddings=True, convert_to_numpy=True, batch_size=64,
                                  show_progress_bar=False)

    return run


ENCODERS = {"encoder alone": onnx_encoder, "torch encoder alone": torch_encoder}


def encoder_pass(cases: list[MediqCase], questions: list[list[str]], replay: bool,
                 run: Callable[[list[str]], object]) -> int:
    """The same texts through an encoder directly (``ENCODERS``), in the calls the patient makes."""
    replies = 0
    for case, asked in zip(cases, questions, strict=True):
        facts = [case.facts[i] for i in FactSelectPatient(case).allowed]
        if replay:
            run([*facts, *asked])
        else:
            run([*facts, asked[0]])
            for question in asked[1:]:
                run([question])
        replies += len(asked)
    return replies


def timed(work: Callable[[], int]) -> tuple[float, float]:
    """(replies per second of wall time, CPU seconds per reply)."""
    wall, cpu = time.perf_counter(), time.process_time()
    replies = work()
    return replies / (time.perf_counter() - wall), (time.process_time() - cpu) / replies


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--questions", type=int, default=10, help="questions per case (default 10)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--file", type=Path,
                        default=Path(os.environ.get("MEDEVAL_DATA_DIR") or default_data_dir())
                        / "mediq" / "imedqa_sample200.jsonl")
    args = parser.parse_args()

    cases = load_cases(args.file, limit=args.cases).cases
    questions = [questions_for(case, args.questions, n) for n, case in enumerate(cases)]
    started = time.perf_counter()
    patient_pass(cases[:1], questions[:1], replay=False)
    fixed_s = time.perf_counter() - started

    encoders = {name: make() for name, make in ENCODERS.items()}
    sides: dict[str, Callable[[], int]] = {}
    for way in ("replay", "interactive"):
        replay = way == "replay"
        sides[f"{way} patient"] = lambda replay=replay: patient_pass(cases, questions, replay)
        for name, run in encoders.items():
            sides[f"{way} {name}"] = lambda replay=replay, run=run: encoder_pass(cases, questions, replay, run)
    rates: dict[str, list[float]] = {name: [] for name in sides}
    cpus: dict[str, list[float]] = {name: [] for name in sides}
    for round_number in range(args.rounds):
        order = list(sides) if round_number % 2 == 0 else list(reversed(sides))
        for name in order:
            rate, cpu = timed(sides[name])
            rates[name].append(rate)
            cpus[name].append(cpu)

    replies = sum(len(asked) for asked in questions)
    print(f"offline MEDIQ patient, {len(cases)} cases, {replies} replies per pass, {args.rounds} rounds "
          f"(interleaved); first case with the encoder load: {fixed_s:.2f} s")
    for name in sides:
        print(f"  {name:<26} median {statistics.median(rates[name]):7.1f} replies/s (min {min(rates[name]):7.1f}), "
              f"{statistics.median(cpus[name]) * 1000:.1f} ms CPU per reply "
              f"({1 / statistics.median(cpus[name]):.0f} replies per CPU second)")
    for way in ("replay", "interactive"):
        for name in encoders:
            ratio = statistics.median(rates[f"{way} patient"]) / statistics.median(rates[f"{way} {name}"])
            print(f"  ratio {way}: patient / {name} {ratio:.2f}x")
    best = statistics.median(rates["replay patient"])
    ok = best >= TARGET_REPLIES_PER_S
    print(f"target replay >= {TARGET_REPLIES_PER_S:.0f} replies/s: {'met' if ok else 'MISSED'} ({best:.1f}); "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
