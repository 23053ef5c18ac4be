"""ICD-9-CM code normalisation and the category rule diagnoses are scored on; apart from the mapper
(``medeval_core.vocabularies.icd9``) so that scoring codes (``score hitk``) imports neither its vocabulary, its
stemmer nor its models.

Category rule (the seed's "first 3 digits", with the two code families it leaves implicit): a numeric code's
category is its first three characters (``428.0`` -> ``428``), an E-code's its first four (``E815.0`` ->
``E815``), a V-code's its first three (``V45.1`` -> ``V45``).
"""

from __future__ import annotations

import re

CODE_PATTERN = re.compile(r"^\s*([EeVv]?)(\d{1,5})(?:\.(\d{1,2}))?\s*$")
# Digits before the dot in each family: numeric codes 3 (001-999), V-codes 2 (V01-V91), E-codes 3 (E000-E999).
_INTEGER_DIGITS = {"": 3, "V": 2, "E": 3}
# Digits after it at most: E-codes have one (E815.0), the others two (428.00, V45.11).
_DECIMAL_DIGITS = {"": 2, "V": 2, "E": 1}


class Icd9Error(ValueError):
    """A code that is not an ICD-9 code, or a mapping that cannot be made; the message says what to fix."""


def normalise_code(text: str) -> str | None:
    """The canonical form of an ICD-9 code (upper case, no dot: ``428.0`` -> ``4280``, ``e815`` -> ``E815``,
    ``38.9`` -> ``0389``), or None when ``text`` is not shaped like one (a diagnosis name)."""
    match = CODE_PATTERN.match(str(text))
    if match is None:
        return None
    family, integer, decimal = match.group(1).upper(), match.group(2), match.group(3) or ""
    width = _INTEGER_DIGITS[family]
    if decimal or len(integer) < width:
        if len(integer) > width:
            return None  # a dot after too many digits (``4280.1``) is no ICD-9 code
        integer = integer.zfill(width)
    if len(integer) + len(decimal) > width + _DECIMAL_DIGITS[family]:
        return None
    return f"{family}{integer}{decimal}"


def display_code(code: str) -> str:
    """The dotted form people read (``4280`` -> ``428.0``, ``E8150`` -> ``E815.0``, ``V451`` -> ``V45.1``)."""
    canonical = normalise_code(code)
    if canonical is None:
        raise Icd9Error(f"{code!r} is not an ICD-9 code (e.g. 428.0, E815.0, V45.1).")
    width = 1 + _INTEGER_DIGITS[canonical[0]] if canonical[0] in "EV" else 3
    return canonical if len(canonical) <= width else f"{canonical[:width]}.{canonical[width:]}"


def category(code: str) -> str:
    """The category the match is made on: 3 characters, E-codes 4 (``E815``), V-codes 3 (``V45``)."""
    canonical = normalise_code(code)
    if canonical is None:
        raise Icd9Error(f"{code!r} is not an ICD-9 code (e.g. 428.0, E815.0, V45.1).")
    return canonical[:4] if canonical.startswith("E") else canonical[:3]
