"""A deterministic stand-in expert for MediQ's benchmark loop (no model): MediQ's ``expert.Expert`` interface.

It asks a fixed sequence of history questions and after each answer scores every option by the content words it
shares with what it knows (initial information and the patient's answers). It chooses when the best option leads
the next by at least two words, otherwise asks again; MediQ's loop forces a choice when the budget is spent.
"""

import re

QUESTIONS = [
    "What symptoms does the patient have and how long have they lasted?",
    "What is the patient's medical history and what medications are taken?",
    "What did the physical examination show?",
    "What were the laboratory results?",
    "What did imaging or other tests show?",
    "Is there any family history or social history such as smoking, alcohol or travel?",
    "What are the vital signs, temperature, blood pressure and pulse?",
    "Has the patient had any treatment so far?",
]


def content_words(text):
    return {word for word in re.findall(r"[a-z]+", text.lower()) if len(word) >= 4}


class KeywordExpert:
    def __init__(self, args, inquiry, options):
        self.args = args
        self.inquiry = inquiry
        self.options = options

    def respond(self, patient_state):
        known = " ".join([patient_state["initial_info"], self.inquiry]
                         + [turn["answer"] for turn in patient_state["interaction_history"]])
        words = content_words(known)
        scores = {letter: len(words & content_words(text)) for letter, text in sorted(self.options.items())}
        ranked = sorted(scores, key=lambda letter: (-scores[letter], letter))
        lead = scores[ranked[0]] - scores[ranked[1]]
        asked = len(patient_state["interaction_history"])
        if lead >= 1 or asked >= len(QUESTIONS):
            return {"type": "choice", "letter_choice": ranked[0], "confidence": lead}
        return {"type": "question", "question": QUESTIONS[asked], "letter_choice": ranked[0], "confidence": lead}
