"""Checking lesion images before they reach a model: format, size, pixel count, integrity, orientation.

Uploads on the page and files of a batch run go through ``validate_image``. Anything unusable raises
``ImageRejected`` whose message is one sentence a clinician can act on. The pixel count is checked from the
header, before any pixel is decoded, so a decompression bomb (a small file that inflates to gigabytes) is refused
without being expanded. Animated PNG and WebP files are refused like GIFs (which frame a model saw would be a
guess). High-bit-depth grayscale (16-bit PNG, opened by Pillow as ``I;16``/``I``) is scaled to 8 bits over its
full range: Pillow's own conversion to RGB clips every value above 255, which turns a 16-bit image near-white.
"""

from __future__ import annotations

import hashlib
import io
import re
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError
from pydantic import BaseModel, ConfigDict, Field

ACCEPTED_FORMATS = {"JPEG": "JPEG", "PNG": "PNG", "WEBP": "WebP"}
UPLOAD_TYPES = ["jpg", "jpeg", "png", "webp"]
# Integer grayscale modes whose samples span 16 bits (Pillow opens 16-bit PNG grayscale as I;16, some files as I).
SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})
SIXTEEN_BIT_MAX = 65535


class ImageRejected(ValueError):
    """The file cannot be used as a lesion image; the message says why and what to do, ``kind`` names the problem
    in a few words (for counts such as "2 truncated or corrupt")."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class ImageLimits(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_bytes: int = Field(default=20 * 1024 * 1024, gt=0)
    max_pixels: int = Field(default=50_000_000, gt=0)
    min_side: int = Field(default=16, gt=0)


DEFAULT_LIMITS = ImageLimits()


class ValidatedImage(BaseModel):
    """A decoded, upright RGB image and the facts recorded with its result."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    image: Image.Image
    name: str
    format: str
    width: int
    height: int
    size_bytes: int
    sha256: str
    exif_orientation: int | None
    source_mode: str = "RGB"
    """Pillow's mode of the decoded file (``I;16`` for 16-bit grayscale, scaled to 8 bits)."""

    def provenance(self) -> dict[str, object]:
        return {"name": self.name, "format": self.format, "width": self.width, "height": self.height,
                "size_bytes": self.size_bytes, "sha256": self.sha256, "exif_orientation": self.exif_orientation,
                "source_mode": self.source_mode}


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"


def validate_image(data: bytes, name: str = "image", limits: ImageLimits = DEFAULT_LIMITS) -> ValidatedImage:
    if len(data) > limits.max_bytes:
        raise ImageRejected(
            f"{name} is {_megabytes(len(data))}, more than the {_megabytes(limits.max_bytes)} limit; "
            "export a smaller JPEG, PNG or WebP.",
            kind="too large a file",
        )
    if not data:
        raise ImageRejected(f"{name} is empty; choose a JPEG, PNG or WebP image file.", kind="empty file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            opened = Image.open(io.BytesIO(data))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageRejected(
            f"{name} declares an enormous pixel count ({exc}); it looks like a decompression bomb and was not "
            "opened.",
            kind="decompression bomb",
        ) from exc
    except UnidentifiedImageError as exc:
        raise ImageRejected(f"{name} is not an image file; upload a JPEG, PNG or WebP photograph.",
                            kind="not an image") from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageRejected(f"{name} has a damaged image header ({exc}); upload the original file again.",
                            kind="damaged header") from exc
    if opened.format not in ACCEPTED_FORMATS:
        raise ImageRejected(f"{name} is a {opened.format} file; upload a JPEG, PNG or WebP image instead.",
                            kind="unsupported format")
    if getattr(opened, "is_animated", False):
        frames = getattr(opened, "n_frames", 2)
        raise ImageRejected(
            f"{name} is an animated {ACCEPTED_FORMATS[opened.format]} with {frames} frames; upload a still image "
            "(export the frame you want as a JPEG, PNG or WebP).",
            kind="animated",
        )
    width, height = opened.size
    if width * height > limits.max_pixels:
        raise ImageRejected(
            f"{name} is {width}x{height} pixels ({width * height:,}), more than the {limits.max_pixels:,}-pixel "
            "limit; this can be a decompression bomb, so it was not decoded. Resize the image and upload it again.",
            kind="too many pixels",
        )
    if min(width, height) < limits.min_side:
        raise ImageRejected(f"{name} is only {width}x{height} pixels; upload an image at least "
                            f"{limits.min_side} pixels on each side.", kind="too small")
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        raise ImageRejected("PIL is set to accept truncated images in this process; medeval refuses to score them.",
                            kind="truncated images allowed")
    try:
        opened.load()
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageRejected(
            f"{name} is truncated or corrupt ({exc}); upload the complete file again.",
            kind="truncated or corrupt",
        ) from exc
    orientation = opened.getexif().get(0x0112)
    upright = ImageOps.exif_transpose(opened)
    image = _to_rgb(upright, name)
    return ValidatedImage(
        image=image,
        name=name,
        format=ACCEPTED_FORMATS[opened.format],
        width=image.width,
        height=image.height,
        size_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        exif_orientation=int(orientation) if orientation is not None else None,
        source_mode=opened.mode,
    )


def _to_rgb(image: Image.Image, name: str) -> Image.Image:
    if image.mode in SIXTEEN_BIT_MODES:
        samples = np.asarray(image, dtype=np.int64)
        if samples.size and (samples.min() < 0 or samples.max() > SIXTEEN_BIT_MAX):
            raise ImageRejected(f"{name} holds grayscale values outside 0-{SIXTEEN_BIT_MAX}; export it as an 8-bit "
                                "or 16-bit PNG.", kind="unusable samples")
        # 65535 / 257 = 255: the full 16-bit range maps onto the full 8-bit one, rounded.
        scaled = ((samples * 255 + SIXTEEN_BIT_MAX // 2) // SIXTEEN_BIT_MAX).astype(np.uint8)
        return Image.fromarray(scaled).convert("RGB")
    if image.mode == "F":
        raise ImageRejected(f"{name} holds floating-point samples; export it as an 8-bit or 16-bit PNG.",
                            kind="unusable samples")
    return image.convert("RGB")


def load_image_file(path: Path, limits: ImageLimits = DEFAULT_LIMITS) -> ValidatedImage:
    try:
        size = path.stat().st_size
    except FileNotFoundError as exc:
        raise ImageRejected(f"{path} does not exist; check the images folder and the CSV's file names.",
                            kind="missing file") from exc
    if size > limits.max_bytes:
        raise ImageRejected(
            f"{path.name} is {_megabytes(size)}, more than the {_megabytes(limits.max_bytes)} limit.",
            kind="too large a file",
        )
    return validate_image(path.read_bytes(), name=path.name, limits=limits)


# The stored error of a case whose image the pre-check refused starts with this, then the kind in brackets, so a
# summary read back from the store (another process, a resume) can count the refusals by kind.
REFUSED_BEFORE_MODEL = "Image refused before the first model call"
_REFUSED_KIND = re.compile(re.escape(REFUSED_BEFORE_MODEL) + r" \[([^\]]+)\]")


def refused_images(images: Sequence[tuple[str, Path]],
                   limits: ImageLimits = DEFAULT_LIMITS) -> dict[str, ImageRejected]:
    """Every (case id, path) image opened, checked and decoded, then dropped: the refused ones by case id, each
    error saying ``REFUSED_BEFORE_MODEL [kind]: why``. Run before any model sees an image, so one bad file of 656
    fails its own case and is reported up front, and the model is never asked about it."""
    refused: dict[str, ImageRejected] = {}
    for case_id, path in images:
        try:
            load_image_file(path, limits)
        except ImageRejected as exc:
            refused[case_id] = ImageRejected(f"{REFUSED_BEFORE_MODEL} [{exc.kind}]: {exc}", kind=exc.kind)
    return refused


def refusal_counts(errors: Iterable[str | None]) -> Counter[str]:
    """How many stored case errors are pre-check refusals, by kind."""
    return Counter(match.group(1) for error in errors if error and (match := _REFUSED_KIND.search(error)))


def describe_refusals(counts: Counter[str], total: int) -> str:
    """"3 of 660 images were refused before the first model call (2 truncated or corrupt, 1 animated)"."""
    kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    refused = sum(counts.values())
    return (f"{refused} of {total} image{'s' if total != 1 else ''} {'was' if refused == 1 else 'were'} refused "
            f"before the first model call ({kinds})")
