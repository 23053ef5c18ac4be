"""Stand-in for MediQ's ``src/helper.py`` (its only model-call module): ``get_response`` answers without a model.

MediQ's ``FactSelectPatient`` makes two model calls, both replaced here deterministically:
- the decomposition of the case context into numbered atomic facts (when the row has no ``atomic_facts``): the
  context split into sentences, numbered from 1;
- the fact selection for a doctor's question: every listed fact sharing a content word (4+ letters) with the
  question, verbatim, one per line; none, MediQ's refusal sentence.
Nothing else of MediQ is replaced: its patient classes and its benchmark loop run as published.
"""

import re

REFUSAL = "The patient cannot answer this question, please do not ask this question again."
DECOMPOSE_MARKER = "Break the following patient information into a list of independent atomic facts"


def content_words(text):
    return {word for word in re.findall(r"[a-z]+", text.lower()) if len(word) >= 4}


def decompose(prompt):
    context = prompt.split("\n", 1)[1].rsplit("\n", 1)[0].strip().strip('"')
    sentences = [s.strip() for s in re.split(r"(?<=\.)\s+", context) if s.strip()]
    return "\n".join(f"{number}. {sentence}" for number, sentence in enumerate(sentences, start=1))


def select_facts(prompt):
    facts_block, question_block = prompt.split("\n\nQuestion from the doctor: ", 1)
    facts = facts_block.split("\n")[1:]
    question = question_block.split("\n\n", 1)[0]
    wanted = content_words(question)
    chosen = [fact for fact in facts if wanted & content_words(fact)]
    return "\n".join(chosen) if chosen else REFUSAL


def get_response(messages, model_name, use_vllm=False, use_api=None, **kwargs):
    prompt = messages[-1]["content"]
    text = decompose(prompt) if prompt.startswith(DECOMPOSE_MARKER) else select_facts(prompt)
    return text, None, {"input_tokens": 0, "output_tokens": 0}
