"""Run transformers' own ``transformers serve`` command with medeval's image-only Qwen2.5-VL processor registered.

The stock Qwen2.5-VL processor also builds a video processor, which needs torchvision (not installable next to
the pinned CPU torch); registering the image-only processor that the transformers backend already uses lets the
unmodified server load the tiny test checkpoint. Usage: ``python -m tests.support.serve_tiny <model> --port N``
followed by any other ``transformers serve`` options.
"""

from __future__ import annotations

import sys

from transformers import AutoProcessor, Qwen2_5_VLConfig
from transformers.cli.transformers import app

from medeval_core.models.qwen_transformers import ImageOnlyQwenProcessor


def main() -> None:
    AutoProcessor.register(Qwen2_5_VLConfig, ImageOnlyQwenProcessor, exist_ok=True)
    app(["serve", *sys.argv[1:]])


if __name__ == "__main__":
    main()
