"""Data sources and the generic engine that finds and downloads them (design.md §4).

A benchmark declares the data sources it reads in its spec (``BenchmarkSpec.data_sources``): a ``DataSource``
names its folder under the data directory (``MEDEVAL_DATA_DIR``), its licence, the files it needs, and how to get
them: a ``FetchPlan`` behind ``data fetch NAME`` for a public release, or instructions for one that must be
requested. ``data_status`` says which sources are there; ``require`` resolves a file a loader needs, or raises
``DataMissingError`` naming the missing file and how to get it; ``fetch`` runs a source's plan, checks sizes and
checksums, and writes each file atomically, so an interrupted or corrupt download never leaves a file that looks
complete.
"""

from __future__ import annotations

import hashlib
import os
import pkgutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, ValidationError

import medeval_core

# httpx and tenacity are imported by the download functions: most users of this module only resolve paths, and
# ``python -m medeval_core --help`` (which lists the fetchable sources) should not pay ~60 ms for an HTTP client.
if TYPE_CHECKING:
    import httpx
    from tenacity import Retrying

SourceState = Literal["found", "partial", "missing"]

_CHUNK_BYTES = 1 << 20


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------------------------------- errors


class DataError(Exception):
    """A data source is missing or could not be downloaded; the message says what to do."""


class DataMissingError(DataError):
    """A file a loader needs is not in the data directory."""

    def __init__(self, message: str, source: str) -> None:
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


class Service(_Frozen):
    """A web service releases are downloaded from: its base URL, which the environment variable ``env`` overrides
    (tests point it at a local server). ``key`` names it in ``Endpoints``."""

    key: str
    env: str
    default: str


FIGSHARE_API = Service(key="figshare_api", env="MEDEVAL_FIGSHARE_API", default="https://api.figshare.com/v2")
GITHUB_RAW = Service(key="github_raw", env="MEDEVAL_GITHUB_RAW", default="https://raw.githubusercontent.com")
SHARED_SERVICES = (FIGSHARE_API, GITHUB_RAW)


class FetchPlan(_Frozen):
    """How ``python -m medeval_core data fetch NAME`` downloads a public release.

    ``plan`` is ``'module:function'``, called with a ``Fetcher`` and the validated options (or None) and returning
    where the files come from (a phrase) and the files (``RemoteFile``; an iterator is consumed one file at a time,
    for services whose download links expire). ``options`` is ``'module:Model'``, a pydantic model of the plan's
    own options, offered as ``data fetch`` options (a tuple field as a comma-separated list). ``services`` are the
    services the plan reaches besides the shared ones, so their environment variables are read.
    """

    name: str
    plan: str
    options: str | None = None
    services: tuple[Service, ...] = ()


class DataSource(_Frozen):
    """A data source: where it lives under the data directory, its licence, and how to get it."""

    name: str
    folder: str
    title: str
    description: str
    licence: str
    required: tuple[Requirement, ...]
    optional: tuple[Requirement, ...] = ()
    fetch: FetchPlan | None = None
    manual_instructions: str | None = None

    @property
    def fetch_command(self) -> str | None:
        return f"python -m medeval_core data fetch {self.fetch.name}" if self.fetch else None

    def how_to_get(self, folder: Path) -> str:
        if self.fetch_command:
            return f"run `{self.fetch_command}`"
        return f"{self.manual_instructions} Folder: {folder}"

    def folder_in(self, data_dir: Path) -> Path:
        return Path(data_dir) / self.folder


class SourceStatus(_Frozen):
    """What one data directory holds of one source."""

    source: DataSource
    path: Path
    state: SourceState
    files: tuple[str, ...]
    missing: tuple[str, ...]
    how_to_get: str


def sources() -> dict[str, DataSource]:
    """Every data source the registered benchmarks declare, by name."""
    # Imported here: the registry's specs are typed with this module's DataSource, so it imports this module.
    from medeval_core import registry

    return registry.declared_sources()


def fetch_plans() -> dict[str, DataSource]:
    """``data fetch`` name -> the source it downloads."""
    return {source.fetch.name: source for source in sources().values() if source.fetch is not None}


def matches(folder: Path, pattern: str) -> list[Path]:
    """The files in ``folder`` matching the glob ``pattern``, sorted."""
    # Leading-dot names are our own in-progress downloads (and OS clutter), never data.
    return sorted(p for p in folder.glob(pattern) if p.is_file() and not p.name.startswith("."))


def first_match(folder: Path, patterns: Iterable[str]) -> list[Path]:
    """The files of the first of ``patterns`` that matches any."""
    for pattern in patterns:
        if found := matches(folder, pattern):
            return found
    return []


def source_status(source: DataSource, data_dir: Path) -> SourceStatus:
    folder = source.folder_in(data_dir)
    files: set[str] = set()
    missing: list[str] = []
    for requirement in (*source.required, *source.optional):
        found = first_match(folder, requirement.patterns) if folder.is_dir() else []
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
    """Each declared source in ``data_dir`` as found, partial or missing, with how to get what is missing."""
    return [source_status(source, Path(data_dir)) for source in sources().values()]


# --------------------------------------------------------------------------------------------------- paths


def missing(source: DataSource, what: str, folder: Path) -> DataMissingError:
    """The error for ``what`` missing from ``folder``, saying how to get it."""
    return DataMissingError(
        f"{source.title}: {what} is missing from {folder}; to get it, {source.how_to_get(folder)}.", source.name
    )


def require(source: DataSource, data_dir: Path, label: str, patterns: Iterable[str]) -> Path:
    """The first file in the source's folder matching ``patterns``; ``DataMissingError`` (naming ``label``) when
    there is none."""
    folder = source.folder_in(data_dir)
    found = first_match(folder, patterns)
    if not found:
        raise missing(source, label, folder)
    return found[0]


# --------------------------------------------------------------------------------------------------- fetching


class Endpoints(BaseModel):
    """Base URLs of the services releases come from, by service key (``figshare_api=...``); tests point them at a
    local server. A service not named here is reached at its default address."""

    model_config = ConfigDict(frozen=True, extra="allow")

    def base_url(self, service: Service) -> str:
        return str((self.model_extra or {}).get(service.key) or service.default).rstrip("/")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Endpoints:
        env = os.environ if environ is None else environ
        return cls(**{service.key: env.get(service.env) or service.default for service in known_services()})


def known_services() -> tuple[Service, ...]:
    """The shared services and those the declared fetch plans add."""
    added = (service for source in fetch_plans().values() if source.fetch for service in source.fetch.services)
    return tuple({service.key: service for service in (*SHARED_SERVICES, *added)}.values())


class RetryPolicy(_Frozen):
    """Attempts per request on connection errors, timeouts and HTTP 408/429/5xx, with exponential waits."""

    attempts: int = 5
    initial_wait_s: float = 1.0
    max_wait_s: float = 30.0


class FetchProgress(_Frozen):
    source: str
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
    source: str
    folder: Path
    origin: str
    files: tuple[FetchedFile, ...]


ProgressCallback = Callable[[FetchProgress], None]


class RemoteFile(_Frozen):
    """One file a fetch plan downloads: its name in the source's folder, its URL, and what the publisher lists
    about it (size, md5, licence), checked against the bytes received."""

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
        overrides = ", ".join(service.env for service in known_services())
        raise DownloadError(f"{response.request.url} answered HTTP {code}; check that it still exists there (and "
                            f"any of {overrides} you set).")


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


def _checks(remote: RemoteFile) -> tuple[str, ...]:
    checks = []
    if remote.size is not None:
        checks.append("size")
    if remote.md5 is not None:
        checks.append("md5")
    return tuple(checks)


def _already_present(target: Path, remote: RemoteFile) -> str | None:
    """The file's sha256 when it is present and provably the listed file, else None (then it is downloaded again)."""
    if remote.size is None or not target.is_file() or target.stat().st_size != remote.size:
        return None
    md5, sha256 = _file_digests(target)
    if remote.md5 is not None and md5 != remote.md5:
        return None
    return sha256


def _download(
    client: httpx.Client,
    source: str,
    remote: RemoteFile,
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
    remote: RemoteFile,
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


Planned = tuple[str, Iterable[RemoteFile]]
"""What a fetch plan returns: where the files come from (a phrase for the report) and the files."""


@dataclass(frozen=True)
class Fetcher:
    """What a fetch plan reaches the services through: requests retried by the policy, base URLs from the
    endpoints, and the plans for the shared services (a figshare article, files of a GitHub repository)."""

    client: httpx.Client
    endpoints: Endpoints
    policy: RetryPolicy

    def base_url(self, service: Service) -> str:
        return self.endpoints.base_url(service)

    def get_json(self, url: str) -> object:
        return _get_json(self.client, url, self.policy)

    def head_size(self, url: str) -> int | None:
        return _head_size(self.client, url, self.policy)

    def figshare_article(self, article_id: int, names: Iterable[str], licence: str) -> Planned:
        """The files ``names`` of a figshare article, with the sizes and md5 sums figshare lists."""
        url = f"{self.base_url(FIGSHARE_API)}/articles/{article_id}"
        try:
            article = _FigshareArticle.model_validate(self.get_json(url))
        except ValidationError as exc:
            raise DownloadError(f"{url} answered with an article listing medeval does not understand ({exc}).") \
                from exc
        listed = {f.name: f for f in article.files}
        wanted = tuple(names)
        absent = [name for name in wanted if name not in listed]
        if absent:
            raise DownloadError(f"figshare article {article_id} no longer lists {', '.join(absent)}; check "
                                f"https://doi.org/10.6084/m9.figshare.{article_id} for the current release.")
        remote = [
            RemoteFile(name=name, url=listed[name].download_url, size=listed[name].size,
                       md5=(listed[name].computed_md5 or listed[name].supplied_md5 or None), licence=licence)
            for name in wanted
        ]
        version = f" version {article.version}" if article.version is not None else ""
        return f"figshare article {article.id}{version}", remote

    def github_files(self, repo: str, branch: str, files: Mapping[str, str], licence: str) -> Planned:
        """Files of a GitHub repository (path in the repository -> name in the source's folder)."""
        remote = []
        for repo_path, name in files.items():
            url = f"{self.base_url(GITHUB_RAW)}/{repo}/{branch}/{quote(repo_path)}"
            # GitHub publishes no checksum for raw files; the size from a HEAD request still lets a rerun skip them.
            remote.append(RemoteFile(name=name, url=url, size=self.head_size(url), licence=licence))
        return f"GitHub {repo} branch {branch}", remote


def _client() -> httpx.Client:
    import httpx

    return httpx.Client(
        follow_redirects=True,
        timeout=httpx.Timeout(30.0, read=120.0),
        # Identity encoding keeps Content-Length equal to the file size, so sizes can be checked as bytes arrive.
        headers={"User-Agent": f"medeval/{medeval_core.__version__}", "Accept-Encoding": "identity"},
    )


def fetch_options_model(plan: FetchPlan) -> type[BaseModel] | None:
    """The pydantic model of the plan's own options, or None when it has none."""
    return pkgutil.resolve_name(plan.options) if plan.options else None


def _plan_source(name: str) -> DataSource:
    plans = fetch_plans()
    if name not in plans:
        raise ValueError(f"Unknown data source {name!r}; choose one of {', '.join(plans) or 'none'}.")
    return plans[name]


def fetch_options(name: str, options: Mapping[str, Any]) -> BaseModel | None:
    """The options of ``data fetch NAME`` validated by its plan's options model (None for a plan without options);
    ``ValueError`` naming the unknown source or each refused option in one sentence."""
    source = _plan_source(name)
    assert source.fetch is not None  # every source of fetch_plans() has one
    options_model = fetch_options_model(source.fetch)
    if options_model is None:
        if options:
            raise ValueError(f"`data fetch {name}` takes no options; drop {', '.join(options)}.")
        return None
    try:
        return options_model.model_validate(options)
    except ValidationError as exc:
        from medeval_core.forms import describe_validation_error

        raise ValueError(describe_validation_error(exc)) from exc


def fetch(
    name: str,
    data_dir: Path,
    *,
    endpoints: Endpoints | None = None,
    retry: RetryPolicy | None = None,
    on_progress: ProgressCallback | None = None,
    **options: Any,
) -> FetchReport:
    """Download one public release (a ``data fetch`` name) into its source's folder under ``data_dir``; files
    already present and intact are kept. ``options`` are the plan's own (``FetchPlan.options``).

    Raises ``ValueError`` for an unknown name or bad options, ``DownloadError`` (``ChecksumError`` for corrupt
    bytes) with a message that says what to do; a file is only ever replaced by a complete, verified download.
    """
    validated = fetch_options(name, options)
    source = _plan_source(name)
    assert source.fetch is not None  # every source of fetch_plans() has one
    plan: Callable[[Fetcher, BaseModel | None], Planned] = pkgutil.resolve_name(source.fetch.plan)
    policy = retry or RetryPolicy()
    folder = source.folder_in(data_dir)
    with _client() as http:
        origin, remote = plan(Fetcher(http, endpoints or Endpoints.from_env(), policy), validated)
        folder.mkdir(parents=True, exist_ok=True)
        files = tuple(_download(http, name, item, folder, policy, on_progress) for item in remote)
    return FetchReport(source=name, folder=folder, origin=origin, files=files)
