"""Generated DDI-format folders for tests (the real DDI data is under a research-use agreement and never used).

Each image is a flat colour unique to its case, so a fake vision endpoint can tell from the pixels which case a
request is about and answer with that case's scripted response.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from PIL import Image

from tests.fake_openai import RecordedRequest, Reply


@dataclass(frozen=True)
class FixtureCase:
    ddi_id: str
    file: str
    skin_tone: int
    malignant: bool
    disease: str
    colour: tuple[int, int, int]


DDI_ROWS = [
    ("melanoma-in-situ", True, 12),
    ("basal-cell-carcinoma-nodular", True, 34),
    ("seborrheic-keratosis", False, 56),
    ("verruca-vulgaris", False, 12),
    ("squamous-cell-carcinoma-in-situ", True, 56),
    ("epidermal-cyst", False, 34),
]


def colour_for(index: int) -> tuple[int, int, int]:
    return (35 * index + 20, 250 - 30 * index, (70 * index) % 256)


def make_ddi_folder(root: Path, rows: list[tuple[str, bool, int]] = DDI_ROWS) -> list[FixtureCase]:
    """Images ``000001.png``... and ``ddi_metadata.csv`` in the DDI schema (malignant written as TRUE/FALSE)."""
    root.mkdir(parents=True, exist_ok=True)
    cases = []
    for index, (disease, malignant, tone) in enumerate(rows, start=1):
        case = FixtureCase(ddi_id=str(index), file=f"{index:06d}.png", skin_tone=tone, malignant=malignant,
                           disease=disease, colour=colour_for(index))
        Image.new("RGB", (64 + 8 * index, 48), case.colour).save(root / case.file)
        cases.append(case)
    pd.DataFrame(
        [{"DDI_ID": c.ddi_id, "DDI_file": c.file, "skin_tone": c.skin_tone,
          "malignant": "TRUE" if c.malignant else "FALSE", "disease": c.disease} for c in cases]
    ).to_csv(root / "ddi_metadata.csv", index=False)
    return cases


def request_colour(request: RecordedRequest) -> tuple[int, int, int]:
    """The flat colour of the image in a chat request (decoded from its data URL)."""
    for message in request.body["messages"]:
        for part in message["content"] if isinstance(message["content"], list) else []:
            if part.get("type") == "image_url":
                data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
                return Image.open(io.BytesIO(data)).convert("RGB").getpixel((0, 0))  # type: ignore[return-value]
    raise AssertionError("The request has no image.")


def responder_by_colour(cases: list[FixtureCase], answers: dict[str, str]):
    """Answer each image request with ``answers[ddi_id]`` for the case whose colour it shows."""
    by_colour = {case.colour: case.ddi_id for case in cases}

    def respond(request: RecordedRequest) -> Reply:
        return Reply(content=answers[by_colour[request_colour(request)]])

    return respond
