"""Lesion cases from a DDI-format folder or from any folder with a CSV of image file and reference diagnosis.

DDI format (Stanford Diverse Dermatology Images): ``ddi_metadata.csv`` with ``DDI_ID, DDI_file, skin_tone,
malignant, disease`` next to the image files. Skin tone groups are 12 (Fitzpatrick I-II), 34 (III-IV) and 56
(V-VI). Any other CSV works when it names its image and reference columns (common names are recognised).

Image paths are relative to the images folder and must stay inside it: a row naming ``../..`` or an absolute path
is refused, so a shared CSV cannot make medeval open files elsewhere on the machine.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from medeval_core.benchmark import BenchmarkError
from medeval_core.benchmarks.ddi.sources import METADATA as DDI_METADATA
from medeval_core.data.files import read_csv_rows
from medeval_core.records import Case

DDI_COLUMNS = ("DDI_ID", "DDI_file", "skin_tone", "malignant", "disease")
SKIN_TONES = (12, 34, 56)
IMAGE_COLUMN_GUESSES = ("DDI_file", "image", "image_path", "file", "filename", "path")
REFERENCE_COLUMN_GUESSES = ("disease", "reference", "diagnosis", "label", "dx")
_TRUE = {"true", "1", "yes", "malignant"}
_FALSE = {"false", "0", "no", "benign"}


class CaseSourceError(BenchmarkError):
    """The folder or CSV cannot be read as lesion cases; the message names the fix."""


class DdiCase(Case):
    """One image with its reference diagnosis. The reference goes only to the judge, never to the model."""

    model_config = ConfigDict(frozen=True)

    image_path: str
    reference: str
    skin_tone: int | None = None
    malignant: bool | None = None


class CaseSource(BaseModel):
    """Where cases come from; stored in a run's parameters so that ``resume`` reads the same cases."""

    model_config = ConfigDict(frozen=True)

    images_dir: str
    metadata: str | None = None
    image_column: str | None = None
    reference_column: str | None = None
    limit: int | None = None


def _pick(columns: list[str], explicit: str | None, guesses: tuple[str, ...], role: str, csv_path: Path) -> str:
    if explicit is not None:
        if explicit not in columns:
            raise CaseSourceError(f"{csv_path} has no column {explicit!r} for the {role}; its columns are "
                                  f"{', '.join(columns)}.")
        return explicit
    lowered = {column.lower(): column for column in columns}
    for guess in guesses:
        if guess.lower() in lowered:
            return lowered[guess.lower()]
    # Named as the source's setting, which the New run form and the CLI (--image-column) both fill: a browser
    # user has no command-line flag to pass.
    setting = "source.image_column" if role == "image file" else "source.reference_column"
    raise CaseSourceError(f"{csv_path} has no recognisable {role} column (columns: {', '.join(columns)}); name it "
                          f"in {setting}.")


def _malignant(value: str, row: int) -> bool | None:
    text = value.strip().lower()
    if not text:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise CaseSourceError(f"Row {row}: malignant must be TRUE or FALSE, got {value!r}.")


def _skin_tone(value: str, row: int) -> int | None:
    text = value.strip()
    if not text:
        return None
    try:
        tone = int(float(text))
    except ValueError:
        tone = -1
    if tone not in SKIN_TONES:
        raise CaseSourceError(f"Row {row}: skin_tone must be 12, 34 or 56 (Fitzpatrick groups), got {value!r}.")
    return tone


def read_rows(path: Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header and the (line number, row) pairs of a case CSV, every field a string."""
    return read_csv_rows(path, CaseSourceError, "it needs a header row (e.g. DDI_file,disease) and one row per image")


def confined_image(images_dir: Path, file_name: str, csv_path: Path, number: int) -> Path:
    """The image path a CSV row names, resolved (symbolic links and ``..`` too); refused outside ``images_dir``."""
    root = images_dir.resolve()
    path = (root / file_name).resolve()
    if not path.is_relative_to(root):
        raise CaseSourceError(
            f"{csv_path} line {number} names the image {file_name!r}, which is outside the images folder {root}; "
            "list image files by their name inside that folder."
        )
    return path


def load_cases(source: CaseSource) -> list[DdiCase]:
    images_dir = Path(source.images_dir)
    if not images_dir.is_dir():
        raise CaseSourceError(f"Images folder {images_dir} does not exist.")
    csv_path = Path(source.metadata) if source.metadata else images_dir / DDI_METADATA
    if not csv_path.is_file():
        raise CaseSourceError(f"Metadata file {csv_path} does not exist; set source.metadata to the CSV of image "
                              "names and reference diagnoses.")
    columns, rows = read_rows(csv_path)
    image_column = _pick(columns, source.image_column, IMAGE_COLUMN_GUESSES, "image file", csv_path)
    reference_column = _pick(columns, source.reference_column, REFERENCE_COLUMN_GUESSES, "reference diagnosis",
                             csv_path)
    id_column = "DDI_ID" if "DDI_ID" in columns else None

    cases: list[DdiCase] = []
    missing: list[str] = []
    for index, row in rows:
        file_name = row[image_column].strip()
        reference = row[reference_column].strip()
        if not file_name or not reference:
            raise CaseSourceError(f"{csv_path} line {index} has an empty {image_column!r} or "
                                  f"{reference_column!r}.")
        path = confined_image(images_dir, file_name, csv_path, index)
        if not path.is_file():
            missing.append(file_name)
            continue
        cases.append(
            DdiCase(
                case_id=row[id_column].strip() if id_column else file_name,
                image_path=str(path),
                reference=reference,
                skin_tone=_skin_tone(row["skin_tone"], index) if "skin_tone" in row else None,
                malignant=_malignant(row["malignant"], index) if "malignant" in row else None,
            )
        )
    if missing:
        raise CaseSourceError(f"{len(missing)} images listed in {csv_path.name} are not in {images_dir} "
                              f"(e.g. {', '.join(missing[:3])}); fix the folder or the CSV.")
    duplicates = sorted(case_id for case_id, n in Counter(case.case_id for case in cases).items() if n > 1)
    if duplicates:
        raise CaseSourceError(f"{csv_path.name} lists these ids more than once: {', '.join(duplicates[:5])}.")
    if not cases:
        raise CaseSourceError(f"{csv_path} lists no images; add one row per image under its header.")
    return cases[: source.limit] if source.limit else cases
