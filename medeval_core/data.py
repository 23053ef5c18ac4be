"""Locating and downloading the official data releases (design.md §4).

Every source lives in one folder under the data directory (``MEDEVAL_DATA_DIR``): ``ddxplus/``, ``mediq/``,
``agentclinic/``, ``lesions/``, ``ddi/``, ``costing/``, ``sdbench/``. ``data_status`` says which are there; one small
function per source resolves the files a loader needs, or raises ``DataMissingError`` naming the missing file and
the command that gets it; ``fetch`` downloads the public releases, checks sizes and checksums, and writes each file
atomically, so an interrupted or corrupt download never leaves a file that looks complete.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Literal
from urllib.parse import quote, urlparse

from pydantic import BaseModel, ConfigDict, ValidationError

import medeval_core

# httpx and tenacity are imported by the download functions: most users of this module only resolve paths, and
# ``python -m medeval_core --help`` (which lists the fetchable sources) should not pay ~60 ms for an HTTP client.
if TYPE_CHECKING:
    import httpx
    from tenacity import Retrying

SourceName = Literal["ddxplus", "mediq", "agentclinic", "lesions", "ddi", "costing", "sdbench"]
FetchName = Literal["ddxplus", "mediq", "agentclinic", "isic"]
SourceState = Literal["found", "partial", "missing"]
DdxplusSplit = Literal["train", "validate", "test"]
MediqDataset = Literal["imedqa", "icraftmd"]

FETCHABLE: tuple[FetchName, ...] = ("ddxplus", "mediq", "agentclinic", "isic")
DDXPLUS_FIGSHARE_ARTICLE = 22687585
DDXPLUS_RELEASE_FILES = (
    "release_evidences.json",
    "release_conditions.json",
    "release_train_patients.zip",
    "release_validate_patients.zip",
    "release_test_patients.zip",
)
DDXPLUS_SAMPLE_PATIENTS = "patients_sample_en.csv"
DEFAULT_ISIC_IDS = tuple(f"ISIC_000000{i}" for i in range(5))
ISIC_ID = re.compile(r"ISIC_\d{7}")
IMAGE_PATTERNS = ("*.jpg", "*.jpeg", "*.png")

DEFAULT_FIGSHARE_API = "https://api.figshare.com/v2"
DEFAULT_GITHUB_RAW = "https://raw.githubusercontent.com"
DEFAULT_ISIC_API = "https://api.isic-archive.com/api/v2"
_CHUNK_BYTES = 1 << 20


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------------------------------- errors


class DataError(Exception):
    """A data source is missing or could not be downloaded; the message says what to do."""


class DataMissingError(DataError):
    """A file a loader needs is not in the data directory."""

    def __init__(self, message: str, source: SourceName) -> None:
        super().__init__(message)
        self.source = source


class DownloadError(DataError):
    """A download failed (network, HTTP status, unexpected listing); no partial file was left."""


class ChecksumError(DownloadError):
    """Downloaded bytes differ from the size or checksum the publisher lists; the file was discarded."""


# --------------------------------------------------------------------------------------------------- sources


class Requirement(_Frozen):
    """One thing a source needs, satisfied by the first of its glob patterns that matches a file."""

    label: str
    patterns: tuple[str, ...]


class DataSource(_Frozen):
    """A data source: where it lives under the data directory, its licence, and how to get it."""

    name: SourceName
    folder: str
    title: str
    description: str
    licence: str
    required: tuple[Requirement, ...]
    optional: tuple[Requirement, ...] = ()
    fetch_name: FetchName | None = None
    manual_instructions: str | None = None

    @property
    def fetch_command(self) -> str | None:
        return f"python -m medeval_core data fetch {self.fetch_name}" if self.fetch_name else None

    def how_to_get(self, folder: Path) -> str:
        if self.fetch_command:
            return f"run `{self.fetch_command}`"
        return f"{self.manual_instructions} Folder: {folder}"


class SourceStatus(_Frozen):
    """What one data directory holds of one source."""

    source: DataSource
    path: Path
    state: SourceState
    files: tuple[str, ...]
    missing: tuple[str, ...]
    how_to_get: str


SOURCES: dict[SourceName, DataSource] = {
    source.name: source
    for source in (
        DataSource(
            name="ddxplus",
            folder="ddxplus",
            title="DDXPlus (English)",
            description="Synthetic patients with evidences, pathology and differential; knowledge base of "
            "223 evidences and 49 pathologies.",
            licence="CC-BY 4.0 (Mila / Dialogue Health Technologies)",
            required=(
                Requirement(label="release_evidences.json", patterns=("release_evidences.json",)),
                Requirement(label="release_conditions.json", patterns=("release_conditions.json",)),
                Requirement(
                    label="patients (release_{train,validate,test}_patients.zip or .csv, or "
                    f"{DDXPLUS_SAMPLE_PATIENTS})",
                    patterns=("release_*_patients.csv", "release_*_patients.zip", DDXPLUS_SAMPLE_PATIENTS),
                ),
            ),
            fetch_name="ddxplus",
        ),
        DataSource(
            name="mediq",
            folder="mediq",
            title="MEDIQ (iMedQA, iCraft-MD)",
            description="Clinical vignettes split into atomic patient facts, for interactive question asking.",
            licence="CC BY 4.0 (Li et al., NeurIPS 2024)",
            required=(
                Requirement(label="iMedQA (all_dev_good.jsonl or imedqa_sample200.jsonl)",
                            patterns=("all_dev_good.jsonl", "imedqa_sample200.jsonl")),
                Requirement(label="iCraft-MD (all_craft_md.jsonl or icraftmd.jsonl)",
                            patterns=("all_craft_md.jsonl", "icraftmd.jsonl")),
            ),
            fetch_name="mediq",
        ),
        DataSource(
            name="agentclinic",
            folder="agentclinic",
            title="AgentClinic MedQA",
            description="OSCE-style cases with history, examination and test results; the bundled "
            "sequential-diagnosis cases.",
            licence="MIT (Samuel Schmidgall)",
            required=(Requirement(label="agentclinic_medqa.jsonl", patterns=("agentclinic_medqa.jsonl",)),),
            optional=(Requirement(label="agentclinic_medqa_extended.jsonl",
                                  patterns=("agentclinic_medqa_extended.jsonl",)),),
            fetch_name="agentclinic",
        ),
        DataSource(
            name="lesions",
            folder="lesions",
            title="ISIC dermoscopic images",
            description="Lesion images from the ISIC Archive for walkthroughs and demos.",
            licence="per image, as the ISIC Archive lists it (the default five are CC-0)",
            required=(Requirement(label="lesion images (.jpg/.jpeg/.png)", patterns=IMAGE_PATTERNS),),
            fetch_name="isic",
        ),
        DataSource(
            name="ddi",
            folder="ddi",
            title="DDI (Diverse Dermatology Images)",
            description="656 clinical images with biopsy-proven diagnoses and Fitzpatrick skin-tone groups.",
            licence="Stanford research-use agreement; cannot be redistributed or downloaded here",
            required=(
                Requirement(label="ddi_metadata.csv", patterns=("ddi_metadata.csv",)),
                Requirement(label="DDI images (.png)", patterns=("*.png",)),
            ),
            manual_instructions="DDI is licensed for research use only: request access to the Stanford AIMI "
            "DDI dataset (linked from https://ddi-dataset.github.io), accept its agreement, and unpack "
            "ddi_metadata.csv and the images.",
        ),
        DataSource(
            name="costing",
            folder="costing",
            title="Test prices",
            description="Price table for ordered tests; without it, test costs are estimates marked as such.",
            licence="CMS fee schedules (US government work, public domain)",
            required=(Requirement(label="cms_prices.csv", patterns=("cms_prices.csv",)),),
            manual_instructions="Build cms_prices.csv from the CMS Clinical Laboratory Fee Schedule and Physician "
            "Fee Schedule files, or supply a charge-master CSV under that name with the columns code, kind, "
            "national_price_usd, source_file, year.",
        ),
        DataSource(
            name="sdbench",
            folder="sdbench",
            title="SDBench (NEJM CPC cases)",
            description="The sequential-diagnosis benchmark cases of the SDBench paper.",
            licence="not public",
            required=(Requirement(label="SDBench case files", patterns=("*",)),),
            manual_instructions="SDBench's NEJM cases are not public and cannot be downloaded; sequential-diagnosis "
            "runs use the AgentClinic cases (`python -m medeval_core data fetch agentclinic`). If you hold the "
            "cases under an agreement with their owners, put them in this folder.",
        ),
    )
}


def _matches(folder: Path, pattern: str) -> list[Path]:
    # Leading-dot names are our own in-progress downloads (and OS clutter), never data.
    return sorted(p for p in folder.glob(pattern) if p.is_file() and not p.name.startswith("."))


def _first_match(folder: Path, patterns: Iterable[str]) -> list[Path]:
    for pattern in patterns:
        if found := _matches(folder, pattern):
            return found
    return []


def source_status(source: DataSource, data_dir: Path) -> SourceStatus:
    folder = Path(data_dir) / source.folder
    files: set[str] = set()
    missing: list[str] = []
    for requirement in (*source.required, *source.optional):
        found = _first_match(folder, requirement.patterns) if folder.is_dir() else []
        files.update(p.name for p in found)
        if not found and requirement in source.required:
            missing.append(requirement.label)
    met = len(source.required) - len(missing)
    state: SourceState = "found" if not missing else ("partial" if met else "missing")
    return SourceStatus(
        source=source,
        path=folder,
        state=state,
        files=tuple(sorted(files)),
        missing=tuple(missing),
        how_to_get=source.how_to_get(folder),
    )


def data_status(data_dir: Path) -> list[SourceStatus]:
    """Each known source in ``data_dir`` as found, partial or missing, with how to get what is missing."""
    return [source_status(source, Path(data_dir)) for source in SOURCES.values()]


# --------------------------------------------------------------------------------------------------- paths


def _missing(source_name: SourceName, what: str, folder: Path) -> DataMissingError:
    source = SOURCES[source_name]
    return DataMissingError(
        f"{source.title}: {what} is missing from {folder}; to get it, {source.how_to_get(folder)}.", source_name
    )


def _require(source_name: SourceName, data_dir: Path, label: str, patterns: Iterable[str]) -> Path:
    folder = Path(data_dir) / SOURCES[source_name].folder
    found = _first_match(folder, patterns)
    if not found:
        raise _missing(source_name, label, folder)
    return found[0]


class DdxplusPaths(_Frozen):
    """The DDXPlus knowledge base and whichever patient files are present (official release or the sample)."""

    folder: Path
    evidences: Path
    conditions: Path
    patients: dict[DdxplusSplit, Path]
    sample_patients: Path | None

    def patients_file(self, split: DdxplusSplit = "test") -> Path:
        """The official patients of ``split``; for the test split, the shared sample when that is all there is."""
        if split in self.patients:
            return self.patients[split]
        if split == "test" and self.sample_patients is not None:
            return self.sample_patients
        raise _missing("ddxplus", f"release_{split}_patients.zip", self.folder)


def ddxplus_paths(data_dir: Path) -> DdxplusPaths:
    folder = Path(data_dir) / "ddxplus"
    evidences = _require("ddxplus", data_dir, "release_evidences.json", ("release_evidences.json",))
    conditions = _require("ddxplus", data_dir, "release_conditions.json", ("release_conditions.json",))
    patients: dict[DdxplusSplit, Path] = {}
    for split in ("train", "validate", "test"):
        # An unpacked CSV reads faster than the zip it came from.
        if found := _first_match(folder, (f"release_{split}_patients.csv", f"release_{split}_patients.zip")):
            patients[split] = found[0]
    sample = folder / DDXPLUS_SAMPLE_PATIENTS
    sample_patients = sample if sample.is_file() else None
    if not patients and sample_patients is None:
        raise _missing("ddxplus", f"a patients file (release_test_patients.zip or {DDXPLUS_SAMPLE_PATIENTS})",
                       folder)
    return DdxplusPaths(folder=folder, evidences=evidences, conditions=conditions, patients=patients,
                        sample_patients=sample_patients)


class MediqPaths(_Frozen):
    """One MEDIQ dataset file: the official release or the shared sample (the protocol's 200 iMedQA cases)."""

    dataset: MediqDataset
    path: Path
    release: Literal["official", "sample"]


_MEDIQ_FILES: dict[MediqDataset, tuple[str, str]] = {
    "imedqa": ("all_dev_good.jsonl", "imedqa_sample200.jsonl"),
    "icraftmd": ("all_craft_md.jsonl", "icraftmd.jsonl"),
}


def mediq_paths(data_dir: Path, dataset: MediqDataset) -> MediqPaths:
    official, sample = _MEDIQ_FILES[dataset]
    path = _require("mediq", data_dir, f"{official} (or {sample})", (official, sample))
    return MediqPaths(dataset=dataset, path=path, release="official" if path.name == official else "sample")


class AgentClinicPaths(_Frozen):
    medqa: Path
    medqa_extended: Path | None


def agentclinic_paths(data_dir: Path) -> AgentClinicPaths:
    medqa = _require("agentclinic", data_dir, "agentclinic_medqa.jsonl", ("agentclinic_medqa.jsonl",))
    extended = medqa.with_name("agentclinic_medqa_extended.jsonl")
    return AgentClinicPaths(medqa=medqa, medqa_extended=extended if extended.is_file() else None)


def lesion_images(data_dir: Path) -> list[Path]:
    """Every lesion image in ``lesions/``, sorted by name."""
    folder = Path(data_dir) / "lesions"
    images = sorted({p for pattern in IMAGE_PATTERNS for p in _matches(folder, pattern)})
    if not images:
        raise _missing("lesions", "lesion images (.jpg/.jpeg/.png)", folder)
    return images


class DdiPaths(_Frozen):
    """The DDI metadata table; its ``DDI_file`` column names images in the same folder."""

    folder: Path
    metadata: Path


def ddi_paths(data_dir: Path) -> DdiPaths:
    metadata = _require("ddi", data_dir, "ddi_metadata.csv", ("ddi_metadata.csv",))
    return DdiPaths(folder=metadata.parent, metadata=metadata)


def cms_prices_path(data_dir: Path) -> Path:
    return _require("costing", data_dir, "cms_prices.csv", ("cms_prices.csv",))


# --------------------------------------------------------------------------------------------------- fetching


class Endpoints(_Frozen):
    """Base URLs of the services the releases come from; tests point them at a local server."""

    figshare_api: str = DEFAULT_FIGSHARE_API
    github_raw: str = DEFAULT_GITHUB_RAW
    isic_api: str = DEFAULT_ISIC_API

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Endpoints:
        env = os.environ if environ is None else environ
        return cls(
            figshare_api=env.get("MEDEVAL_FIGSHARE_API") or DEFAULT_FIGSHARE_API,
            github_raw=env.get("MEDEVAL_GITHUB_RAW") or DEFAULT_GITHUB_RAW,
            isic_api=env.get("MEDEVAL_ISIC_API") or DEFAULT_ISIC_API,
        )


class RetryPolicy(_Frozen):
    """Attempts per request on connection errors, timeouts and HTTP 408/429/5xx, with exponential waits."""

    attempts: int = 5
    initial_wait_s: float = 1.0
    max_wait_s: float = 30.0


class FetchProgress(_Frozen):
    source: FetchName
    file: str
    done_bytes: int
    total_bytes: int | None
    stage: Literal["downloading", "downloaded", "already present"]


class FetchedFile(_Frozen):
    name: str
    path: Path
    url: str
    size: int
    sha256: str
    checks: tuple[str, ...]
    action: Literal["downloaded", "already present"]
    licence: str | None = None


class FetchReport(_Frozen):
    source: FetchName
    folder: Path
    origin: str
    files: tuple[FetchedFile, ...]


ProgressCallback = Callable[[FetchProgress], None]


class _RemoteFile(_Frozen):
    name: str
    url: str
    size: int | None
    md5: str | None = None
    licence: str | None = None


class _RetryableStatus(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"{response.request.url} answered HTTP {response.status_code}")


def _check_status(response: httpx.Response) -> None:
    code = response.status_code
    if code in (408, 429) or code >= 500:
        raise _RetryableStatus(response)
    if code >= 400:
        raise DownloadError(f"{response.request.url} answered HTTP {code}; check that it still exists there (and "
                            "any MEDEVAL_FIGSHARE_API, MEDEVAL_GITHUB_RAW or MEDEVAL_ISIC_API you set).")


def _retrying(policy: RetryPolicy) -> Retrying:
    import httpx
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

    return Retrying(
        stop=stop_after_attempt(policy.attempts),
        wait=wait_exponential(multiplier=policy.initial_wait_s, max=policy.max_wait_s),
        retry=retry_if_exception_type((httpx.TransportError, _RetryableStatus)),
        reraise=True,
    )


def _gave_up(url: str, policy: RetryPolicy, exc: Exception) -> DownloadError:
    return DownloadError(f"Could not download {url} after {policy.attempts} attempts ({exc}); check the network "
                         "connection and run the same command again (finished files are kept).")


def _get_json(client: httpx.Client, url: str, policy: RetryPolicy) -> object:
    import httpx

    try:
        for attempt in _retrying(policy):
            with attempt:
                response = client.get(url, headers={"Accept": "application/json"})
                _check_status(response)
    except (httpx.TransportError, _RetryableStatus) as exc:
        raise _gave_up(url, policy, exc) from exc
    try:
        return response.json()
    except ValueError as exc:
        raise DownloadError(f"{url} did not answer with JSON; the service may have changed its API.") from exc


def _head_size(client: httpx.Client, url: str, policy: RetryPolicy) -> int | None:
    import httpx

    try:
        for attempt in _retrying(policy):
            with attempt:
                response = client.head(url)
                _check_status(response)
    except (httpx.TransportError, _RetryableStatus) as exc:
        raise _gave_up(url, policy, exc) from exc
    length = response.headers.get("content-length")
    return int(length) if length and length.isdigit() else None


def _file_digests(path: Path) -> tuple[str, str]:
    md5, sha256 = hashlib.md5(usedforsecurity=False), hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK_BYTES):
            md5.update(chunk)
            sha256.update(chunk)
    return md5.hexdigest(), sha256.hexdigest()


def _checks(remote: _RemoteFile) -> tuple[str, ...]:
    checks = []
    if remote.size is not None:
        checks.append("size")
    if remote.md5 is not None:
        checks.append("md5")
    return tuple(checks)


def _already_present(target: Path, remote: _RemoteFile) -> str | None:
    """The file's sha256 when it is present and provably the listed file, else None (then it is downloaded again)."""
    if remote.size is None or not target.is_file() or target.stat().st_size != remote.size:
        return None
    md5, sha256 = _file_digests(target)
    if remote.md5 is not None and md5 != remote.md5:
        return None
    return sha256


def _download(
    client: httpx.Client,
    source: FetchName,
    remote: _RemoteFile,
    folder: Path,
    policy: RetryPolicy,
    on_progress: ProgressCallback | None,
) -> FetchedFile:
    import httpx

    target = folder / remote.name

    def report(done: int, total: int | None, stage: Literal["downloading", "downloaded", "already present"]) -> None:
        if on_progress is not None:
            on_progress(FetchProgress(source=source, file=remote.name, done_bytes=done, total_bytes=total,
                                      stage=stage))

    if (sha256 := _already_present(target, remote)) is not None:
        report(target.stat().st_size, remote.size, "already present")
        return FetchedFile(name=remote.name, path=target, url=remote.url, size=target.stat().st_size,
                           sha256=sha256, checks=_checks(remote), action="already present", licence=remote.licence)

    # Kept past its `with` (delete=False): the finished file is renamed into place, a failed one removed below.
    handle = tempfile.NamedTemporaryFile(dir=folder, prefix=f".{remote.name}.", suffix=".part",  # noqa: SIM115
                                         delete=False)
    temp = Path(handle.name)
    try:
        with handle:
            try:
                for attempt in _retrying(policy):
                    with attempt:
                        md5, sha = _stream_into(client, remote, handle, report)
            except (httpx.TransportError, _RetryableStatus) as exc:
                raise _gave_up(remote.url, policy, exc) from exc
            size = handle.tell()
            handle.flush()
            os.fsync(handle.fileno())
        if remote.size is not None and size != remote.size:
            raise ChecksumError(f"{remote.name}: received {size:,} bytes but the publisher lists {remote.size:,}; "
                                "the download was discarded, run the command again.")
        if remote.md5 is not None and md5 != remote.md5:
            raise ChecksumError(f"{remote.name}: md5 {md5} differs from the published {remote.md5}; the download "
                                "was discarded, run the command again (if it repeats, the release has changed).")
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
    report(size, remote.size, "downloaded")
    return FetchedFile(name=remote.name, path=target, url=remote.url, size=size, sha256=sha,
                       checks=_checks(remote), action="downloaded", licence=remote.licence)


def _stream_into(
    client: httpx.Client,
    remote: _RemoteFile,
    handle: IO[bytes],
    report: Callable[[int, int | None, Literal["downloading"]], None],
) -> tuple[str, str]:
    """One attempt: (re)write the whole body into ``handle`` and return its md5 and sha256."""
    import httpx

    handle.seek(0)
    handle.truncate()
    md5, sha256 = hashlib.md5(usedforsecurity=False), hashlib.sha256()
    with client.stream("GET", remote.url) as response:
        _check_status(response)
        length = response.headers.get("content-length")
        total = remote.size if remote.size is not None else (int(length) if length and length.isdigit() else None)
        done = 0
        report(done, total, "downloading")
        for chunk in response.iter_bytes(_CHUNK_BYTES):
            handle.write(chunk)
            md5.update(chunk)
            sha256.update(chunk)
            done += len(chunk)
            report(done, total, "downloading")
        if length and length.isdigit() and "content-encoding" not in response.headers and done != int(length):
            # h11 normally catches a short body; this also covers servers that close early without saying so.
            raise httpx.RemoteProtocolError(f"{remote.url} sent {done} of {length} bytes", request=response.request)
    return md5.hexdigest(), sha256.hexdigest()


class _FigshareFile(BaseModel):
    name: str
    size: int
    download_url: str
    computed_md5: str = ""
    supplied_md5: str = ""


class _FigshareArticle(BaseModel):
    id: int
    title: str = ""
    version: int | None = None
    files: list[_FigshareFile]


def _plan_ddxplus(client: httpx.Client, endpoints: Endpoints, policy: RetryPolicy) -> tuple[str, list[_RemoteFile]]:
    url = f"{endpoints.figshare_api.rstrip('/')}/articles/{DDXPLUS_FIGSHARE_ARTICLE}"
    try:
        article = _FigshareArticle.model_validate(_get_json(client, url, policy))
    except ValidationError as exc:
        raise DownloadError(f"{url} answered with an article listing medeval does not understand ({exc}).") from exc
    listed = {f.name: f for f in article.files}
    absent = [name for name in DDXPLUS_RELEASE_FILES if name not in listed]
    if absent:
        raise DownloadError(f"figshare article {DDXPLUS_FIGSHARE_ARTICLE} no longer lists {', '.join(absent)}; "
                            "check https://doi.org/10.6084/m9.figshare.22687585 for the current release.")
    remote = [
        _RemoteFile(name=name, url=listed[name].download_url, size=listed[name].size,
                    md5=(listed[name].computed_md5 or listed[name].supplied_md5 or None),
                    licence="CC-BY 4.0")
        for name in DDXPLUS_RELEASE_FILES
    ]
    version = f" version {article.version}" if article.version is not None else ""
    return f"figshare article {article.id}{version}", remote


def _plan_github(
    client: httpx.Client, endpoints: Endpoints, policy: RetryPolicy, repo: str, branch: str,
    files: Mapping[str, str], licence: str,
) -> tuple[str, list[_RemoteFile]]:
    remote = []
    for repo_path, name in files.items():
        url = f"{endpoints.github_raw.rstrip('/')}/{repo}/{branch}/{quote(repo_path)}"
        # GitHub publishes no checksum for raw files; the size from a HEAD request still lets a rerun skip them.
        remote.append(_RemoteFile(name=name, url=url, size=_head_size(client, url, policy), licence=licence))
    return f"GitHub {repo} branch {branch}", remote


class _IsicFile(BaseModel):
    url: str
    size: int


class _IsicFiles(BaseModel):
    full: _IsicFile


class _IsicImage(BaseModel):
    isic_id: str
    copyright_license: str = ""
    files: _IsicFiles


def _plan_isic(
    client: httpx.Client, endpoints: Endpoints, policy: RetryPolicy, isic_ids: Iterable[str]
) -> tuple[str, Iterator[_RemoteFile]]:
    def images() -> Iterator[_RemoteFile]:
        # Lazily, one image at a time: the archive's download URLs are signed and expire.
        for isic_id in isic_ids:
            url = f"{endpoints.isic_api.rstrip('/')}/images/{isic_id}/"
            try:
                image = _IsicImage.model_validate(_get_json(client, url, policy))
            except ValidationError as exc:
                raise DownloadError(f"{url} answered with image metadata medeval does not understand ({exc}).") from exc
            suffix = PurePosixPath(urlparse(image.files.full.url).path).suffix.lower()
            name = image.isic_id + (suffix if suffix in (".jpg", ".jpeg", ".png") else ".jpg")
            yield _RemoteFile(name=name, url=image.files.full.url, size=image.files.full.size,
                              licence=image.copyright_license or None)

    return "ISIC Archive", images()


def _client() -> httpx.Client:
    import httpx

    return httpx.Client(
        follow_redirects=True,
        timeout=httpx.Timeout(30.0, read=120.0),
        # Identity encoding keeps Content-Length equal to the file size, so sizes can be checked as bytes arrive.
        headers={"User-Agent": f"medeval/{medeval_core.__version__}", "Accept-Encoding": "identity"},
    )


def validate_isic_ids(isic_ids: Iterable[str]) -> tuple[str, ...]:
    ids = tuple(isic_ids)
    bad = [i for i in ids if not ISIC_ID.fullmatch(i)]
    if bad or not ids:
        raise ValueError(f"ISIC image ids look like ISIC_0000000 (ISIC_ and seven digits); got {bad or 'none'}.")
    return ids


def fetch(
    name: FetchName,
    data_dir: Path,
    *,
    endpoints: Endpoints | None = None,
    isic_ids: Iterable[str] = DEFAULT_ISIC_IDS,
    retry: RetryPolicy | None = None,
    on_progress: ProgressCallback | None = None,
) -> FetchReport:
    """Download one public release into its folder under ``data_dir``; files already present and intact are kept.

    Raises ``DownloadError`` (``ChecksumError`` for corrupt bytes) with a message that says what to do; a file is
    only ever replaced by a complete, verified download.
    """
    if name not in FETCHABLE:
        raise ValueError(f"Unknown data source {name!r}; choose one of {', '.join(FETCHABLE)}.")
    ids = validate_isic_ids(isic_ids) if name == "isic" else ()
    endpoints = endpoints or Endpoints.from_env()
    policy = retry or RetryPolicy()
    folder = Path(data_dir) / ("lesions" if name == "isic" else name)
    remote: Iterable[_RemoteFile]
    with _client() as http:
        if name == "ddxplus":
            origin, remote = _plan_ddxplus(http, endpoints, policy)
        elif name == "mediq":
            origin, remote = _plan_github(http, endpoints, policy, "stellalisy/mediQ", "main",
                                          {"data/all_dev_good.jsonl": "all_dev_good.jsonl",
                                           "data/all_craft_md.jsonl": "all_craft_md.jsonl"},
                                          "CC BY 4.0")
        elif name == "agentclinic":
            origin, remote = _plan_github(http, endpoints, policy, "SamuelSchmidgall/AgentClinic", "main",
                                          {"agentclinic_medqa.jsonl": "agentclinic_medqa.jsonl",
                                           "agentclinic_medqa_extended.jsonl": "agentclinic_medqa_extended.jsonl",
                                           "LICENSE.txt": "LICENSE.txt"},
                                          "MIT")
        else:
            origin, remote = _plan_isic(http, endpoints, policy, ids)
        folder.mkdir(parents=True, exist_ok=True)
        files = tuple(_download(http, name, item, folder, policy, on_progress) for item in remote)
    return FetchReport(source=name, folder=folder, origin=origin, files=files)
