"""The protocol's prompt files (``prompts/``), read verbatim and filled without ``str.format``.

Model outputs and reference labels go into these templates. ``str.format`` would choke on (or expand) braces in
that text, and filling placeholders one after another would expand a placeholder name that appears inside an
earlier value, so ``fill`` substitutes all placeholders in one pass over the template only.
"""

from __future__ import annotations

import re
from pathlib import Path

from medeval_core.data.files import read_json
from medeval_core.settings import DEFAULT_PROMPTS_DIR


class PromptError(ValueError):
    """A prompt file is missing or a template does not have the placeholders the caller fills."""


def prompt_path(name: str, prompts_dir: Path | None = None, suffix: str = ".txt") -> Path:
    return (prompts_dir or DEFAULT_PROMPTS_DIR) / f"{name}{suffix}"


def load_prompt(name: str, prompts_dir: Path | None = None) -> str:
    """The text of ``prompts/<name>.txt``, without the file's final line break (the spec's text ends there)."""
    path = prompt_path(name, prompts_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise PromptError(f"Prompt file {path} is missing; restore it from the repository.") from exc
    return text.removesuffix("\n")


def load_json(name: str, prompts_dir: Path | None = None) -> object:
    """A JSON file under ``prompts/`` (for example the label vocabulary ``labels_160case``)."""
    return read_json(prompt_path(name, prompts_dir, suffix=".json"), PromptError,
                     missing="is missing; restore it from the repository.",
                     invalid="is not valid JSON; restore it from the repository")


def load_labels(name: str = "labels_160case", prompts_dir: Path | None = None) -> list[str]:
    """A candidate-label vocabulary, in the file's order (the protocol preserves it)."""
    labels = load_json(name, prompts_dir)
    if not isinstance(labels, list) or not labels or not all(isinstance(label, str) and label for label in labels):
        raise PromptError(f"{prompt_path(name, prompts_dir, '.json')} must be a non-empty JSON list of labels.")
    return labels


def fill(template: str, **values: str) -> str:
    """Replace each exact ``{name}`` token of ``values`` in one pass; every given name must occur in the template."""
    missing = [name for name in values if "{" + name + "}" not in template]
    if missing:
        raise PromptError(f"The template has no placeholder {', '.join('{' + m + '}' for m in missing)}.")
    if not values:
        return template
    pattern = re.compile("|".join(re.escape("{" + name + "}") for name in values))
    return pattern.sub(lambda match: values[match.group(0)[1:-1]], template)
