"""The protocol files are byte-exact copies of the SkinGPT-R1 evaluation settings document."""

import json
import re
from pathlib import Path

import pytest

from medeval_core.settings import load_settings

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO.parent / "shared" / "spec" / "skingpt-r1-evaluation-settings.md"

LABELS_IN_ORDER = [
    "Fungal infection - Tinea", "Seborrheic Keratoses", "vitiligo", "Infestations and Bites", "Atopic Dermatitis",
    "Rosacea", "Eczema", "Psoriasis", "Herpes", "Melanoma", "Fungal infection - Nail Fungal infection", "Acne",
    "bullous disease", "Bacteria Infection", "Basal Cell Carcinoma", "Actinic Keratosis", "Sycosis Barbae",
    "Cellulitis", "Impetigo", "Fungal infection - Fungal infection", "Lupus", "Hives", "Vascular Tumors",
]


def spec_code_blocks() -> dict[str, str]:
    """Map each `prompts/NAME.txt` that the document says a block is stored in (or comes from) to the block text."""
    if not SPEC.exists():
        pytest.skip(f"{SPEC} is not beside the checkout")
    text = SPEC.read_text(encoding="utf-8")
    blocks = {}
    for match in re.finditer(r"`(prompts/[a-z_]+\.txt)`:?\s*\n\n```text\n(.*?)\n```", text, flags=re.S):
        blocks[match.group(1)] = match.group(2) + "\n"
    return blocks


def test_every_prompt_file_matches_the_document_byte_for_byte() -> None:
    blocks = spec_code_blocks()
    assert set(blocks) == {
        "prompts/ddi_system.txt", "prompts/ddi_user.txt", "prompts/classification_user.txt",
        "prompts/ddi_judge_system.txt", "prompts/ddi_judge_user.txt",
    }
    for relative, expected in blocks.items():
        assert (REPO / relative).read_bytes() == expected.encode("utf-8"), relative


def test_prompt_placeholders_are_present() -> None:
    assert "{candidate_labels}" in (REPO / "prompts/classification_user.txt").read_text()
    judge_user = (REPO / "prompts/ddi_judge_user.txt").read_text()
    assert "{ground_truth}" in judge_user and "{model_output}" in judge_user


def test_labels_are_the_23_candidates_in_the_given_order() -> None:
    labels = json.loads((REPO / "prompts/labels_160case.json").read_text(encoding="utf-8"))
    assert labels == LABELS_IN_ORDER
    assert len(labels) == 23


def test_generation_settings_hold_every_value_of_the_document() -> None:
    generation = load_settings().generation
    assert generation.batch_size == 16
    assert generation.max_new_tokens == 4096
    assert generation.attn_implementation == "flash_attention_2"
    assert generation.do_sample is True
    assert (generation.temperature, generation.top_p, generation.repetition_penalty) == (0.7, 0.9, 1.0)
    assert generation.seed == 42
    assert generation.dtype == "bfloat16" and generation.allow_tf32 is True
    assert generation.padding_side == "left"
    assert (generation.min_pixels, generation.max_pixels) == (3136, 1003520)
    assert generation.use_cache is True


def test_judge_settings_hold_every_value_of_the_document() -> None:
    judge = load_settings().judge_settings("ddi")
    assert judge.base_url == "https://dashscope.aliyuncs.com/compatible-mode/v1"
    assert judge.model == "qwen3.8-max"
    assert judge.temperature == 0.0 and judge.max_tokens == 300
    assert judge.response_format == {"type": "json_object"}
    assert judge.extra_body == {"enable_thinking": False}
    assert judge.timeout_seconds == 180 and judge.sdk_max_retries == 0
    batch = judge.batch_evaluator_defaults
    assert batch.concurrency == 16
    assert (batch.requests_per_minute, batch.tokens_per_minute, batch.rate_window_seconds) == (180, 2_000_000, 60)
    assert batch.max_retries_after_first_attempt == 8
    assert (batch.retry_initial_seconds, batch.retry_max_seconds) == (2, 120)
    assert batch.retry_jitter_seconds == (0.25, 1.5)
    assert batch.progress_every == 10
    assert batch.model_output_tail_characters == 20000


def test_files_equal_the_upstream_release_when_it_is_available(data_dir: Path) -> None:
    upstream = data_dir / "skingpt"
    if not upstream.is_dir():
        pytest.skip("the SkinGPT-R1 release files are not in the data folder")
    for sub in ("prompts", "configs"):
        for path in sorted((upstream / sub).iterdir()):
            assert (REPO / sub / path.name).read_bytes() == path.read_bytes(), path.name
