"""Recompute the SkinGPT-R1 document's reported classification results from their counts alone.

The document reports PanDerm 90/160 = 56.25 % and SkinGPT-R1 81/160 = 50.63 %, a difference of 9 cases and
5.63 points computed before rounding. Exact fractions and half-up rounding reproduce the document's own rounding
(binary floats would turn 50.625 into 50.62).
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

from pydantic import BaseModel

from medeval_core.metrics.stats import wilson_interval

# (name, correct, total, percentage as printed in the document)
REPORTED_CLASSIFICATION = (("PanDerm", 90, 160, "56.25"), ("SkinGPT-R1", 81, 160, "50.63"))
REPORTED_DIFFERENCE = (9, "5.63")


def percent_2dp(value: Fraction) -> str:
    """A fraction as a percentage with two decimals, rounded half up."""
    exact = Decimal(value.numerator * 100) / Decimal(value.denominator)
    return str(exact.quantize(Decimal("0.01"), ROUND_HALF_UP))


class CountCheck(BaseModel):
    name: str
    correct: int
    total: int
    percent: str
    reported_percent: str | None = None
    wilson_low_percent: str
    wilson_high_percent: str

    @property
    def matches(self) -> bool:
        return self.reported_percent is None or self.percent == self.reported_percent


class DifferenceCheck(BaseModel):
    cases: int
    points: str
    points_unrounded: float
    reported_cases: int
    reported_points: str

    @property
    def matches(self) -> bool:
        return self.cases == self.reported_cases and self.points == self.reported_points


class ReportedCheck(BaseModel):
    models: list[CountCheck]
    difference: DifferenceCheck
    wilson: list[CountCheck]
    all_match: bool


def check_counts(name: str, correct: int, total: int, reported_percent: str | None = None) -> CountCheck:
    low, high = wilson_interval(correct, total)
    return CountCheck(
        name=name,
        correct=correct,
        total=total,
        percent=percent_2dp(Fraction(correct, total)),
        reported_percent=reported_percent,
        wilson_low_percent=f"{low * 100:.2f}",
        wilson_high_percent=f"{high * 100:.2f}",
    )


def parse_counts(text: str) -> tuple[int, int]:
    """'72/158' -> (72, 158), with a message that says what is expected when it is not that shape."""
    try:
        correct_text, total_text = text.split("/")
        correct, total = int(correct_text), int(total_text)
    except ValueError:
        raise ValueError(f"{text!r} is not a count like 72/158 (successes/total).") from None
    if total <= 0 or not 0 <= correct <= total:
        raise ValueError(f"{text!r} needs 0 <= successes <= total and total > 0.")
    return correct, total


def check_reported(extra_wilson: list[tuple[int, int]] | None = None) -> ReportedCheck:
    models = [check_counts(name, c, n, reported) for name, c, n, reported in REPORTED_CLASSIFICATION]
    (_, c_a, n_a, _), (_, c_b, n_b, _) = REPORTED_CLASSIFICATION
    points = Fraction(c_a, n_a) - Fraction(c_b, n_b)
    difference = DifferenceCheck(
        cases=c_a - c_b,
        points=percent_2dp(points),
        points_unrounded=float(points * 100),
        reported_cases=REPORTED_DIFFERENCE[0],
        reported_points=REPORTED_DIFFERENCE[1],
    )
    wilson = [check_counts(f"{c}/{n}", c, n) for c, n in extra_wilson or []]
    return ReportedCheck(
        models=models,
        difference=difference,
        wilson=wilson,
        all_match=all(m.matches for m in models) and difference.matches,
    )
