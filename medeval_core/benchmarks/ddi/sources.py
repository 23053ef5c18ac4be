"""The lesion benchmark's data sources: the DDI release (research use only, requested from Stanford AIMI), and
dermoscopic images from the ISIC Archive with the plan ``data fetch isic`` downloads them by (image ids as an
option; the archive's download links are signed and expire, so each image is listed just before it is fetched)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from medeval_core.data import (
    DataSource,
    DownloadError,
    Fetcher,
    FetchPlan,
    Planned,
    RemoteFile,
    Requirement,
    Service,
    matches,
    missing,
    require,
)

METADATA = "ddi_metadata.csv"
IMAGE_PATTERNS = ("*.jpg", "*.jpeg", "*.png")
DEFAULT_ISIC_IDS = tuple(f"ISIC_000000{i}" for i in range(5))
ISIC_ID = re.compile(r"ISIC_\d{7}")
ISIC_API = Service(key="isic_api", env="MEDEVAL_ISIC_API", default="https://api.isic-archive.com/api/v2")

DDI = DataSource(
    name="ddi",
    folder="ddi",
    title="DDI (Diverse Dermatology Images)",
    description="656 clinical images with biopsy-proven diagnoses and Fitzpatrick skin-tone groups.",
    licence="Stanford research-use agreement; cannot be redistributed or downloaded here",
    required=(
        Requirement(label=METADATA, patterns=(METADATA,)),
        Requirement(label="DDI images (.png)", patterns=("*.png",)),
    ),
    manual_instructions="DDI is licensed for research use only: request access to the Stanford AIMI "
    f"DDI dataset (linked from https://ddi-dataset.github.io), accept its agreement, and unpack {METADATA} and the "
    "images.",
)

LESIONS = DataSource(
    name="lesions",
    folder="lesions",
    title="ISIC dermoscopic images",
    description="Lesion images from the ISIC Archive for walkthroughs and demos.",
    licence="per image, as the ISIC Archive lists it (the default five are CC-0)",
    required=(Requirement(label="lesion images (.jpg/.jpeg/.png)", patterns=IMAGE_PATTERNS),),
    fetch=FetchPlan(name="isic", plan=f"{__name__}:fetch_images", options=f"{__name__}:IsicOptions",
                    services=(ISIC_API,)),
)


def validate_isic_ids(isic_ids: Iterable[str]) -> tuple[str, ...]:
    ids = tuple(isic_ids)
    bad = [i for i in ids if not ISIC_ID.fullmatch(i)]
    if bad or not ids:
        raise ValueError(f"ISIC image ids look like ISIC_0000000 (ISIC_ and seven digits); got {bad or 'none'}.")
    return ids


class IsicOptions(BaseModel):
    """``data fetch isic``'s own option."""

    isic_ids: tuple[str, ...] = Field(default=DEFAULT_ISIC_IDS, description="ISIC image ids to download")

    @field_validator("isic_ids")
    @classmethod
    def _well_formed(cls, isic_ids: tuple[str, ...]) -> tuple[str, ...]:
        return validate_isic_ids(isic_ids)


class _IsicFile(BaseModel):
    url: str
    size: int


class _IsicFiles(BaseModel):
    full: _IsicFile


class _IsicImage(BaseModel):
    isic_id: str
    copyright_license: str = ""
    files: _IsicFiles


def fetch_images(fetcher: Fetcher, options: IsicOptions) -> Planned:
    def images() -> Iterator[RemoteFile]:
        # Lazily, one image at a time: the archive's download URLs are signed and expire.
        for isic_id in options.isic_ids:
            url = f"{fetcher.base_url(ISIC_API)}/images/{isic_id}/"
            try:
                image = _IsicImage.model_validate(fetcher.get_json(url))
            except ValidationError as exc:
                raise DownloadError(f"{url} answered with image metadata medeval does not understand ({exc}).") from exc
            suffix = PurePosixPath(urlparse(image.files.full.url).path).suffix.lower()
            name = image.isic_id + (suffix if suffix in (".jpg", ".jpeg", ".png") else ".jpg")
            yield RemoteFile(name=name, url=image.files.full.url, size=image.files.full.size,
                             licence=image.copyright_license or None)

    return "ISIC Archive", images()


def lesion_images(data_dir: Path) -> list[Path]:
    """Every lesion image in the lesions folder, sorted by name."""
    folder = LESIONS.folder_in(data_dir)
    images = sorted({p for pattern in IMAGE_PATTERNS for p in matches(folder, pattern)})
    if not images:
        raise missing(LESIONS, "lesion images (.jpg/.jpeg/.png)", folder)
    return images


class DdiPaths(BaseModel):
    """The DDI metadata table; its ``DDI_file`` column names images in the same folder."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    folder: Path
    metadata: Path


def ddi_paths(data_dir: Path) -> DdiPaths:
    metadata = require(DDI, data_dir, METADATA, (METADATA,))
    return DdiPaths(folder=metadata.parent, metadata=metadata)
