"""A tiny random-weight Qwen2.5-VL checkpoint, built offline in a fraction of a second for tests.

It has the real architecture (``Qwen2_5_VLForConditionalGeneration``), the real chat template and a real
byte-level BPE tokenizer with the special tokens the Qwen2.5-VL processor needs, so the transformers backend's
loading, preprocessing and generation code runs unchanged; only the sizes are small and the weights random.
Never commit the output: tests build it into a temporary folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2VLImageProcessorPil,
    TokenizersBackend,
)

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

# Qwen2-VL / Qwen2.5-VL's chat template as shipped with the released checkpoints (a default system message is
# inserted when the conversation has none).
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

TRAINING_TEXT = [
    "You are a dermatology assistant. Analyze the supplied skin-lesion image.",
    "Analyze the dermatologic image and state the single most likely final diagnosis.",
    "Final diagnosis: melanoma. Differential: seborrheic keratosis, dysplastic nevus.",
    "Basal cell carcinoma, squamous cell carcinoma in situ, verruca vulgaris, epidermal cyst.",
    "Choose exactly one diagnosis from the list. Use the exact label spelling.",
]

# Smallest sizes that keep every code path of the real model: windowed and full vision attention, the patch
# merger, 3-D rotary positions (mrope_section sums to head_dim / 2 = 8).
TEXT_HIDDEN = 64
TEXT_HEADS = 4
VISION_HIDDEN = 32
MIN_PIXELS = 28 * 28 * 4
MAX_PIXELS = 28 * 28 * 16


def build_tokenizer() -> TokenizersBackend:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    return TokenizersBackend(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )


def build_tiny_qwen(folder: Path, seed: int = 0) -> Path:
    """Write a complete checkpoint folder (weights, config, tokenizer, image processor, template) to ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    token_id = tokenizer.convert_tokens_to_ids
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": TEXT_HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": TEXT_HEADS,
            "num_key_value_heads": 2,
            "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
            "bos_token_id": token_id("<|endoftext|>"),
            "eos_token_id": token_id("<|im_end|>"),
            "pad_token_id": token_id("<|endoftext|>"),
        },
        vision_config={
            "depth": 2,
            "hidden_size": VISION_HIDDEN,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": TEXT_HIDDEN,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 56,
            "fullatt_block_indexes": [1],
        },
        image_token_id=token_id("<|image_pad|>"),
        video_token_id=token_id("<|video_pad|>"),
        vision_start_token_id=token_id("<|vision_start|>"),
        vision_end_token_id=token_id("<|vision_end|>"),
    )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    image_processor = Qwen2VLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    image_processor.save_pretrained(folder)
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    # The released Qwen2.5-VL checkpoints ship sampling values in generation_config.json; the backend must not let
    # them leak into the protocol's decoding, so the tiny checkpoint carries them too.
    generation = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    generation.update(QWEN_RELEASED_SAMPLING)
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2), encoding="utf-8")
    return folder


QWEN_RELEASED_SAMPLING = {"do_sample": True, "temperature": 0.1, "top_p": 0.001, "top_k": 1, "repetition_penalty": 1.05}


@pytest.fixture(scope="session")
def tiny_qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2.5-VL checkpoint folder for the whole test session (import this fixture into a test module)."""
    return build_tiny_qwen(tmp_path_factory.mktemp("tiny-qwen"))
