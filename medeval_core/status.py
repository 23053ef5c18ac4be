"""What the sidebar and the home page show: store, data sources and model backends, as typed records."""

from __future__ import annotations

from pydantic import BaseModel

from medeval_core import registry
from medeval_core.data import data_status
from medeval_core.errors import one_line
from medeval_core.redaction import redact
from medeval_core.settings import BackendChoice, Settings, api_key, role_env_key, unconfigured
from medeval_core.store import open_store, redact_url


class StoreStatus(BaseModel):
    url: str
    reachable: bool
    counts: dict[str, int] = {}
    error: str | None = None


class BackendStatus(BaseModel):
    role: str
    used_by: str = ""
    backend: str
    model: str
    base_url: str | None
    configured: bool
    working: bool
    """A model serves the role, or its offline stand-in does (shown as *offline*, not as missing)."""
    api_key_env: str
    api_key_set: bool
    hint: str


ROLE_HINTS = {
    "vlm": "Set MEDEVAL_VLM_BACKEND=transformers and MEDEVAL_VLM_MODEL=/path/to/checkpoint, "
           "or MEDEVAL_VLM_BASE_URL=http://host:port/v1 with MEDEVAL_VLM_MODEL for an OpenAI-compatible server.",
    "judge": "The offline rule-based judge is used; set MEDEVAL_JUDGE_BASE_URL and MEDEVAL_JUDGE_MODEL "
             "(key in the variable named below) for the LLM judge of the protocol.",
    "chat": "Set MEDEVAL_CHAT_BASE_URL and MEDEVAL_CHAT_MODEL to use an OpenAI-compatible chat model as an agent.",
}


def store_status(settings: Settings) -> StoreStatus:
    url = redact_url(settings.db_url)
    try:
        return StoreStatus(url=url, reachable=True, counts=open_store(settings.db_url).counts())
    except Exception as exc:  # noqa: BLE001 - shown to the user as the store's state, whatever the driver raised
        return StoreStatus(url=url, reachable=False, error=one_line(redact(f"{type(exc).__name__}: {exc}")))


def role_hint(role: str) -> str:
    """How to configure ``role``: the shipped roles have their own words, any other role the generic variables."""
    if role in ROLE_HINTS:
        return ROLE_HINTS[role]
    key = role_env_key(role)
    return (f"Set MEDEVAL_{key}_BASE_URL (an OpenAI-compatible endpoint ending in /v1) and MEDEVAL_{key}_MODEL, "
            f"or MEDEVAL_{key}_BACKEND; the key goes in the variable named below.")


def backend_status(role: str, choice: BackendChoice, used_by: list[str] | None = None) -> BackendStatus:
    needs_key = choice.backend == "openai"
    offline = choice.backend == "none" and role in registry.offline_roles()
    return BackendStatus(
        role=registry.role_titles().get(role, role),
        used_by=", ".join(used_by or []),
        backend="offline" if offline else choice.backend,
        working=choice.configured or offline,
        # The offline judge is rules, not a model: showing the LLM judge's model name would mislead.
        model=choice.model if choice.backend not in ("none", "offline") else "",
        base_url=choice.base_url,
        configured=choice.configured,
        api_key_env=choice.api_key_env,
        api_key_set=bool(api_key(choice.api_key_env)) if needs_key else False,
        hint="" if choice.configured and choice.backend != "offline" else role_hint(role),
    )


def backends_status(settings: Settings) -> list[BackendStatus]:
    """Every configured role (``configs/backends.json`` and ``MEDEVAL_<ROLE>_*``), then every other role a
    registered benchmark declares (not configured, with the variables that would configure it)."""
    used_by: dict[str, list[str]] = {}
    declared: dict[str, str] = {}  # role key -> the spelling the benchmark uses
    for role, benchmarks in registry.model_roles().items():
        declared.setdefault(role_env_key(role), role)
        used_by.setdefault(role_env_key(role), []).extend(benchmarks)
    rows = [backend_status(role, choice, used_by.get(role_env_key(role))) for role, choice in settings.roles.items()]
    configured = {role_env_key(role) for role in settings.roles}
    for key, role in declared.items():
        if key not in configured:
            rows.append(backend_status(role, unconfigured(role), used_by[key]))
    return rows


class DataRow(BaseModel):
    name: str
    state: str
    icon: str
    files: int
    how_to_get: str
    used_by: str = ""
    """The benchmarks whose specs name this source."""


STATE_ICONS = {"found": ":material/check_circle:", "partial": ":material/warning:", "missing": ":material/cancel:"}


def data_status_rows(settings: Settings) -> list[DataRow]:
    """One row per data source under MEDEVAL_DATA_DIR, with the command (or request) that gets a missing one and
    the benchmarks that read it (from their specs)."""
    used_by = registry.data_sources()
    return [
        DataRow(
            name=status.source.title,
            state=status.state,
            icon=STATE_ICONS[status.state],
            files=len(status.files),
            how_to_get="" if status.state == "found" else status.how_to_get,
            used_by=", ".join(used_by.get(status.source.name, [])),
        )
        for status in data_status(settings.data_dir)
    ]
