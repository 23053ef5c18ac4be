"""DDI inputs: image validation, case loading, prompts and classification label mapping."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from medeval_core.benchmarks.ddi.cases import CaseSource, CaseSourceError, load_cases
from medeval_core.benchmarks.ddi.images import ImageLimits, ImageRejected, validate_image
from medeval_core.benchmarks.ddi.tasks import canonical_label, classification_prompt, match_label, open_prompt
from medeval_core.prompts import load_labels
from tests.ddi_fixtures import DDI_ROWS, make_ddi_folder

LABELS = load_labels()


def encoded(image: Image.Image, fmt: str, **kwargs: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **kwargs)
    return buffer.getvalue()


def test_a_16_bit_grayscale_gradient_keeps_its_tones() -> None:
    gradient = np.tile(np.linspace(0, 65535, 256).round().astype(np.uint16), (64, 1))
    source = Image.fromarray(gradient)
    assert source.mode == "I;16"
    result = validate_image(encoded(source, "PNG"), name="gradient16.png")
    pixels = np.asarray(result.image)
    assert pixels.shape == (64, 256, 3) and (pixels[..., 0] == pixels[..., 2]).all()
    expected = np.round(gradient / 257).astype(np.int64)
    assert np.abs(pixels[..., 0].astype(np.int64) - expected).max() <= 1
    assert pixels[0, 0, 0] == 0 and pixels[0, -1, 0] == 255 and 120 <= pixels.mean() <= 135  # not near-white
    assert result.provenance()["source_mode"] == "I;16"


@pytest.mark.parametrize("fmt", ["PNG", "WEBP"])
def test_an_animated_image_is_refused_like_a_gif(fmt: str) -> None:
    frames = [Image.new("RGB", (32, 32), color) for color in ("red", "blue", "green")]
    data = encoded(frames[0], fmt, save_all=True, append_images=frames[1:])
    with pytest.raises(ImageRejected, match=r"animated .* with 3 frames; upload a still image"):
        validate_image(data, name=f"moving.{fmt.lower()}")


def png_bomb(side: int) -> bytes:
    """A real PNG of ``side`` x ``side`` 1-bit pixels, all zero: a few hundred KB that would decode to side² pixels."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\x00" * (1 + (side + 7) // 8)
    compressor = zlib.compressobj(9)
    body = b"".join(compressor.compress(row) for _ in range(side)) + compressor.flush()
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")


@pytest.mark.parametrize(("fmt", "name"), [("JPEG", "JPEG"), ("PNG", "PNG"), ("WEBP", "WebP")])
def test_accepted_formats(fmt: str, name: str) -> None:
    result = validate_image(encoded(Image.new("RGB", (50, 40), (200, 10, 10)), fmt), name=f"lesion.{fmt.lower()}")
    assert (result.format, result.width, result.height, result.image.mode) == (name, 50, 40, "RGB")
    assert len(result.sha256) == 64


def test_exif_orientation_is_applied() -> None:
    image = Image.new("RGB", (60, 20), (0, 0, 0))
    image.paste((255, 255, 255), (0, 0, 10, 20))  # a white band on the left edge
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display"
    result = validate_image(encoded(image, "JPEG", exif=exif.tobytes(), quality=95))
    assert (result.width, result.height, result.exif_orientation) == (20, 60, 6)
    assert result.image.getpixel((10, 2))[0] > 200  # the band is now along the top


def test_decompression_bomb_is_refused_without_decoding() -> None:
    data = png_bomb(12_000)
    assert len(data) < 1_000_000
    with pytest.raises(ImageRejected, match="decompression bomb"):
        validate_image(data, name="bomb.png")


def test_pixel_and_size_limits() -> None:
    data = encoded(Image.new("RGB", (300, 300)), "PNG")
    with pytest.raises(ImageRejected, match="90,000"):
        validate_image(data, limits=ImageLimits(max_pixels=50_000))
    with pytest.raises(ImageRejected, match="MB limit"):
        validate_image(data, limits=ImageLimits(max_bytes=100))
    with pytest.raises(ImageRejected, match="at least 16 pixels"):
        validate_image(encoded(Image.new("RGB", (10, 300)), "PNG"))


def test_non_images_truncated_files_and_other_formats_are_refused() -> None:
    with pytest.raises(ImageRejected, match="not an image"):
        validate_image(b"%PDF-1.7 this is a document", name="report.pdf")
    jpeg = encoded(Image.effect_noise((200, 200), 64).convert("RGB"), "JPEG")
    with pytest.raises(ImageRejected, match="truncated or corrupt"):
        validate_image(jpeg[: len(jpeg) // 2], name="cut.jpg")
    with pytest.raises(ImageRejected, match="GIF"):
        validate_image(encoded(Image.new("RGB", (40, 40)), "GIF"), name="anim.gif")
    with pytest.raises(ImageRejected, match="empty"):
        validate_image(b"", name="nothing.png")


def test_real_isic_image_is_accepted(data_dir: Path) -> None:
    path = data_dir / "lesions" / "ISIC_0000002.jpg"
    result = validate_image(path.read_bytes(), name=path.name)
    assert (result.format, result.width, result.height) == ("JPEG", 1022, 767)


def test_ddi_folder_loads_with_metadata(tmp_path: Path) -> None:
    fixture = make_ddi_folder(tmp_path / "ddi")
    cases = load_cases(CaseSource(images_dir=str(tmp_path / "ddi")))
    assert [c.case_id for c in cases] == [f.ddi_id for f in fixture]
    assert [(c.reference, c.malignant, c.skin_tone) for c in cases] == DDI_ROWS
    assert all(Path(c.image_path).is_file() for c in cases)
    assert [c.case_id for c in load_cases(CaseSource(images_dir=str(tmp_path / "ddi"), limit=2))] == ["1", "2"]


def test_any_csv_with_image_and_reference_columns(tmp_path: Path) -> None:
    make_ddi_folder(tmp_path / "imgs")
    csv = tmp_path / "labels.csv"
    pd.DataFrame({"image": ["000002.png", "000001.png"], "dx": ["Melanoma", "Acne"]}).to_csv(csv, index=False)
    cases = load_cases(CaseSource(images_dir=str(tmp_path / "imgs"), metadata=str(csv)))
    assert [(c.case_id, c.reference, c.skin_tone) for c in cases] == [("000002.png", "Melanoma", None),
                                                                         ("000001.png", "Acne", None)]
    renamed = tmp_path / "renamed.csv"
    pd.DataFrame({"picture": ["000003.png"], "truth": ["Psoriasis"]}).to_csv(renamed, index=False)
    with pytest.raises(CaseSourceError, match=r"source\.image_column"):
        load_cases(CaseSource(images_dir=str(tmp_path / "imgs"), metadata=str(renamed)))
    explicit = load_cases(CaseSource(images_dir=str(tmp_path / "imgs"), metadata=str(renamed),
                                     image_column="picture", reference_column="truth"))
    assert explicit[0].reference == "Psoriasis"


def test_case_source_errors_name_the_problem(tmp_path: Path) -> None:
    make_ddi_folder(tmp_path / "ddi")
    (tmp_path / "ddi" / "000002.png").unlink()
    with pytest.raises(CaseSourceError, match=r"1 images listed .* \(e\.g\. 000002\.png\)"):
        load_cases(CaseSource(images_dir=str(tmp_path / "ddi")))
    bad = tmp_path / "bad"
    make_ddi_folder(bad)
    frame = pd.read_csv(bad / "ddi_metadata.csv", dtype=str)
    frame.loc[0, "skin_tone"] = "7"
    frame.to_csv(bad / "ddi_metadata.csv", index=False)
    with pytest.raises(CaseSourceError, match="skin_tone must be 12, 34 or 56"):
        load_cases(CaseSource(images_dir=str(bad)))
    with pytest.raises(CaseSourceError, match="does not exist"):
        load_cases(CaseSource(images_dir=str(tmp_path / "nowhere")))


def test_prompts_are_the_protocol_files() -> None:
    prompt = open_prompt()
    assert prompt.system.startswith("You are a dermatology assistant.")
    assert prompt.user.startswith("Analyze the dermatologic image.")
    classification = classification_prompt(LABELS)
    assert classification.system is None
    assert len(LABELS) == 23
    listed = classification.user.split("Choose exactly one diagnosis from:\n", 1)[1].split("\nUse the exact", 1)[0]
    assert listed.split("\n") == LABELS
    assert classification.user.startswith("Analyze the image, reason step by step, and provide the final diagnosis.")


@pytest.mark.parametrize(
    ("answer", "label", "status"),
    [
        ("The lesion is pigmented and asymmetric.\nFinal diagnosis: Melanoma", "Melanoma", "exact"),
        ("Differential: Eczema, Psoriasis.\n**Final diagnosis:** Atopic Dermatitis", "Atopic Dermatitis", "exact"),
        ("Final answer: Fungal infection - Tinea", "Fungal infection - Tinea", "exact"),
        ("Final diagnosis: Melanoma\nDifferential diagnosis: Seborrheic Keratoses", "Melanoma", "exact"),
        ("Final diagnosis: Melanoma or Basal Cell Carcinoma", None, "ambiguous"),
        ("Final diagnosis: melanoma", None, "none"),
        ("It could be many things.", None, "none"),
        ("Reasoning...\nVitiligo", None, "none"),
        ("Reasoning...\nvitiligo", "vitiligo", "exact"),
    ],
)
def test_classification_answers_map_to_exact_labels(answer: str, label: str | None, status: str) -> None:
    match = match_label(answer, LABELS)
    assert (match.label, match.status) == (label, status)


def test_spelling_misses_are_recorded_but_not_scored() -> None:
    match = match_label("Final diagnosis: basal cell carcinoma", LABELS)
    assert match.label is None and match.lenient_label == "Basal Cell Carcinoma"
    assert canonical_label("basal-cell carcinoma", LABELS) == "Basal Cell Carcinoma"
    assert canonical_label("melanoma-in-situ", LABELS) is None


def test_label_scoring_needs_the_exact_label_the_reference_names() -> None:
    from medeval_core.benchmarks.ddi.tasks import score_label

    assert score_label("Final diagnosis: Basal Cell Carcinoma", "basal-cell carcinoma", LABELS).correct
    spelling_miss = score_label("Final diagnosis: basal cell carcinoma", "Basal Cell Carcinoma", LABELS)
    assert not spelling_miss.correct and spelling_miss.reference_label == "Basal Cell Carcinoma"
    assert not score_label("Final diagnosis: Melanoma", "Basal Cell Carcinoma", LABELS).correct
    outside = score_label("Final diagnosis: Melanoma", "melanoma-in-situ", LABELS)
    assert outside.reference_label is None and not outside.correct
