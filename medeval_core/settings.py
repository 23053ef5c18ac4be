"""Typed settings: the protocol files in ``configs/`` plus the environment.

Every run stores ``Settings.effective()`` and its hash, so a score can always be traced back to exactly what
produced it. Secrets are never part of the settings: only the *names* of the environment variables that hold
API keys are, and ``api_key()`` reads the value at the moment it is needed.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from collections.abc import Mapping
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError

import medeval_core
from medeval_core.data.files import read_json
from medeval_core.errors import SettingsError
from medeval_core.redaction import register_secret

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG_DIR = PROJECT_ROOT / "configs"
DEFAULT_PROMPTS_DIR = PROJECT_ROOT / "prompts"
DEFAULT_VAR_DIR = PROJECT_ROOT / "var"
INSTALLED_DIR = Path(sys.prefix) / "share" / "medeval"
"""Where ``make install`` writes files built once per environment (the ICD-9 vocabulary, the encoder's ONNX graph), so
that a first use reads a file even with an empty cache directory."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GenerationSettings(_Strict):
    """Vision-language generation settings (``configs/evaluation.json``)."""

    batch_size: int = Field(gt=0)
    max_new_tokens: int = Field(gt=0)
    attn_implementation: Literal["flash_attention_2", "sdpa", "eager"]
    temperature: float = Field(ge=0)
    top_p: float = Field(gt=0, le=1)
    repetition_penalty: float = Field(gt=0)
    seed: int
    do_sample: bool
    dtype: Literal["bfloat16", "float16", "float32"]
    allow_tf32: bool
    padding_side: Literal["left", "right"]
    min_pixels: int = Field(gt=0)
    max_pixels: int = Field(gt=0)
    use_cache: bool


class JudgeBatchDefaults(_Strict):
    concurrency: int = Field(gt=0)
    requests_per_minute: int = Field(gt=0)
    tokens_per_minute: int = Field(gt=0)
    max_retries_after_first_attempt: int = Field(ge=0)
    progress_every: int = Field(gt=0)
    retry_initial_seconds: float = Field(gt=0)
    retry_max_seconds: float = Field(gt=0)
    retry_jitter_seconds: tuple[float, float]
    rate_window_seconds: float = Field(gt=0)
    model_output_tail_characters: int = Field(gt=0)


class JudgeRequestSettings(_Strict):
    """One judge's request and batch-evaluator settings (``configs/<name>_judge.json``, named by the benchmark
    whose judge uses them). ``base_url`` and ``model`` are the judge role's endpoint when no other layer sets one
    (``models.for_role``)."""

    base_url: str
    model: str
    temperature: float
    max_tokens: int = Field(gt=0)
    response_format: dict[str, Any]
    extra_body: dict[str, Any]
    timeout_seconds: float = Field(gt=0)
    sdk_max_retries: int = Field(ge=0)
    batch_evaluator_defaults: JudgeBatchDefaults


BackendKind = Literal["none", "offline", "transformers", "openai"]


class BackendChoice(_Strict):
    """Which implementation serves one model role, and where. ``api_key_env`` names a variable, never a key."""

    backend: BackendKind
    model: str = ""
    base_url: str | None = None
    api_key_env: str
    devices: str | None = None
    max_tokens: int | None = Field(default=None, gt=0)
    """A chat role's cap on the length of each reply (``MEDEVAL_<ROLE>_MAX_TOKENS``); unset: the client's 1,024.
    A vision model takes its own from ``configs/evaluation.json``, a judge from its ``configs/<name>_judge.json``."""

    @property
    def configured(self) -> bool:
        return self.backend not in ("none",)


ROLE_FIELDS = ("backend", "model", "base_url", "devices", "max_tokens")
"""The ``BackendChoice`` fields an environment variable ``MEDEVAL_<ROLE>_<FIELD>`` can set, for any role."""

ENV_PREFIX = "MEDEVAL_"


def role_env_key(role: str) -> str:
    """The part of ``MEDEVAL_<ROLE>_*`` that names ``role``: upper case, ``-`` as ``_`` (``case-judge`` ->
    ``CASE_JUDGE``). Two spellings with the same key are the same role; nothing else spells a role's key."""
    return role.upper().replace("-", "_")


def overriding_variables(role: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """The ``MEDEVAL_<ROLE>_*`` variables set for ``role`` (they win over files and the Models page)."""
    prefix = f"{ENV_PREFIX}{role_env_key(role)}_"
    fields = {f"{prefix}{field.upper()}" for field in ROLE_FIELDS}
    return sorted(key for key in (os.environ if environ is None else environ) if key in fields)


def default_api_key_env(role: str) -> str:
    return f"{ENV_PREFIX}{role_env_key(role)}_API_KEY"


def unconfigured(role: str) -> BackendChoice:
    """What a role nobody configured gets: no backend, and the key variable it would read."""
    return BackendChoice(backend="none", api_key_env=default_api_key_env(role))


class BackendRoles(RootModel[dict[str, BackendChoice]]):
    """Model roles (``configs/backends.json``): role name -> the backend that serves it. Any role name is allowed
    (``vlm``, ``judge``, ``chat``, ``gatekeeper``, ...)."""

    model_config = ConfigDict(frozen=True)


class RoleOverride(BaseModel):
    """One role's ``MEDEVAL_<ROLE>_*`` variables."""

    model_config = ConfigDict(extra="forbid")

    backend: BackendKind | None = None
    model: str | None = None
    base_url: str | None = None
    devices: str | None = None
    max_tokens: int | None = Field(default=None, gt=0)

    def changes(self) -> dict[str, Any]:
        changes = self.model_dump(exclude_none=True)
        # A base URL alone means "use this OpenAI-compatible endpoint": asking for both would be redundant.
        if "base_url" in changes and "backend" not in changes:
            changes["backend"] = "openai"
        return changes


class EnvironmentOverrides(BaseModel):
    """``MEDEVAL_*`` environment variables; each one set replaces the matching file value.

    ``roles`` holds ``MEDEVAL_<ROLE>_BACKEND/_MODEL/_BASE_URL/_DEVICES/_MAX_TOKENS`` by role key (see ``role_env_key``).
    """

    model_config = ConfigDict(extra="forbid")

    data_dir: Path | None = None
    db_url: str | None = None
    config_dir: Path | None = None
    sign_in_hours: float = Field(default=12.0, gt=0)
    """How long an annotator's sign-in lasts in a browser (reloads and new tabs included) before it asks again."""
    walkthrough_idle_hours: float = Field(default=24.0, gt=0)
    """How long an open walkthrough may sit without a step before it counts as abandoned."""
    roles: dict[str, RoleOverride] = {}


class Settings(_Strict):
    config_dir: Path
    prompts_dir: Path
    data_dir: Path
    db_url: str
    generation: GenerationSettings
    judges: dict[str, JudgeRequestSettings]
    roles: dict[str, BackendChoice]

    def role(self, name: str) -> BackendChoice:
        """The backend serving the role ``name`` (any spelling with the same ``role_env_key``); a role nobody
        configured gets backend ``none``."""
        key = role_env_key(name)
        for role, choice in self.roles.items():
            if role_env_key(role) == key:
                return choice
        return unconfigured(name)

    def judge_settings(self, name: str) -> JudgeRequestSettings:
        """The request settings of the judge ``name`` (``configs/<name>_judge.json``)."""
        try:
            return self.judges[name]
        except KeyError:
            known = ", ".join(sorted(self.judges))
            raise SettingsError(
                f"No request settings for the judge {name!r} (known: {known}); add configs/{name}_judge.json."
            ) from None

    def with_judge_settings(self, name: str, request: JudgeRequestSettings) -> Settings:
        """A copy whose judge ``name`` uses ``request`` (tests and benchmarks scale the protocol's timings)."""
        return self.model_copy(update={"judges": {**self.judges, name: request}})

    def effective(self) -> dict[str, Any]:
        """JSON-ready view of everything that can change a result (paths as strings, no secret values)."""
        return json.loads(self.model_dump_json())

    def settings_hash(self) -> str:
        return fingerprint(self.effective())


def fingerprint(payload: Any) -> str:
    """sha256 of the canonical JSON form: equal settings hash equally whatever the key order."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _validated(model: type[BaseModel], path: Path) -> Any:
    raw = read_json(path, SettingsError, missing="is missing; restore it from the repository.",
                    invalid="is not valid JSON; fix it or restore it from the repository")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise SettingsError(f"Configuration file {path} has invalid values: {exc}") from exc


def _apply_role_overrides(roles: dict[str, BackendChoice], env: EnvironmentOverrides) -> dict[str, BackendChoice]:
    by_key: dict[str, str] = {}
    for role in roles:
        other = by_key.setdefault(role_env_key(role), role)
        if other != role:
            raise SettingsError(f"configs/backends.json names the roles {other!r} and {role!r}, which are the same "
                                f"role (both read MEDEVAL_{role_env_key(role)}_*); keep one.")
    updated = dict(roles)
    for key, override in env.roles.items():
        changes = override.changes()
        if key in by_key:
            role = by_key[key]
            updated[role] = roles[role].model_copy(update=changes)
        else:
            # A role only the environment names is created: MEDEVAL_GATEKEEPER_BASE_URL alone is enough.
            role = key.lower().replace("_", "-")
            updated[role] = unconfigured(role).model_copy(update=changes)
    return updated


def default_data_dir() -> Path:
    """The data folder when ``MEDEVAL_DATA_DIR`` is not set, for the CLI, the app and the tests alike: the shared
    folder beside the checkout (``../shared/data``) when there is one, else ``var/data``."""
    shared = PROJECT_ROOT.parent / "shared" / "data"
    return shared if shared.is_dir() else DEFAULT_VAR_DIR / "data"


def cache_dir() -> Path:
    """Where results derived from input files are kept between runs (parsed patient files, embeddings of fixed
    lists): ``MEDEVAL_CACHE_DIR`` when set, else ``var/cache``. Entries are named by the sha256 of what they were
    derived from, so a changed input is never served from an old entry."""
    configured = os.environ.get("MEDEVAL_CACHE_DIR")
    return Path(configured).expanduser() if configured else DEFAULT_VAR_DIR / "cache"


def _with_registered(roles: dict[str, BackendChoice],
                     registered: Mapping[str, BackendChoice]) -> dict[str, BackendChoice]:
    """``roles`` with each registered default in place of the file's entry for the same role key."""
    by_key = {role_env_key(role): role for role in roles}
    updated = dict(roles)
    for role, choice in registered.items():
        updated[by_key.get(role_env_key(role), role)] = choice
    return updated


def default_db_url() -> str:
    return f"sqlite:///{DEFAULT_VAR_DIR / 'medeval.db'}"


def load_settings(environ: Mapping[str, str] | None = None,
                  registered: Mapping[str, BackendChoice] | None = None) -> Settings:
    """Read ``configs/``, put the backends ``registered`` on the Models page (role -> default) over the file's
    roles, and apply ``environ`` (the process environment by default) last, so a variable always wins.

    Raises ``SettingsError`` with a readable message.
    """
    env = _environment(environ)
    config_dir = (env.config_dir or DEFAULT_CONFIG_DIR).resolve()
    roles: dict[str, BackendChoice] = _validated(BackendRoles, config_dir / "backends.json").root
    if registered:
        roles = _with_registered(roles, registered)
    return Settings(
        config_dir=config_dir,
        prompts_dir=DEFAULT_PROMPTS_DIR,
        data_dir=(env.data_dir or default_data_dir()).resolve(),
        db_url=env.db_url or default_db_url(),
        generation=_validated(GenerationSettings, config_dir / "evaluation.json"),
        judges=_judge_settings(config_dir),
        roles=_apply_role_overrides(roles, env),
    )


def _environment(environ: Mapping[str, str] | None) -> EnvironmentOverrides:
    try:
        return EnvironmentOverrides.model_validate(_env_kwargs(os.environ if environ is None else environ))
    except ValidationError as exc:
        names = ", ".join(_variable_name(error["loc"]) for error in exc.errors())
        raise SettingsError(f"A MEDEVAL_* environment variable has an invalid value ({names}): {exc}") from exc


# Not part of ``Settings``: they change no result, so they must not change the settings hash runs store.
def sign_in_lifetime(environ: Mapping[str, str] | None = None) -> timedelta:
    """``MEDEVAL_SIGN_IN_HOURS`` (12 unless set): how long a browser stays signed in."""
    return timedelta(hours=_environment(environ).sign_in_hours)


def walkthrough_idle_limit(environ: Mapping[str, str] | None = None) -> timedelta:
    """``MEDEVAL_WALKTHROUGH_IDLE_HOURS`` (24 unless set): an open walkthrough idle longer is abandoned."""
    return timedelta(hours=_environment(environ).walkthrough_idle_hours)


def _variable_name(loc: tuple[int | str, ...]) -> str:
    parts = [str(part) for part in loc[:3] if part != "roles"]
    return ENV_PREFIX + "_".join(parts).upper()


JUDGE_FILE_SUFFIX = "_judge.json"


def _judge_settings(config_dir: Path) -> dict[str, JudgeRequestSettings]:
    """``configs/<name>_judge.json`` by judge name, each kept value for value (a judge that needs its file and
    finds none says so through ``Settings.judge_settings``)."""
    paths = {path.name[: -len(JUDGE_FILE_SUFFIX)]: path for path in sorted(config_dir.glob(f"*{JUDGE_FILE_SUFFIX}"))}
    return {name: _validated(JudgeRequestSettings, path) for name, path in paths.items()}


def _env_kwargs(environ: Mapping[str, str]) -> dict[str, Any]:
    """``MEDEVAL_DATA_DIR``-style variables by field, and ``MEDEVAL_<ROLE>_<FIELD>`` ones by role key."""
    fields = set(EnvironmentOverrides.model_fields) - {"roles"}
    suffixes = {f"_{field.upper()}": field for field in ROLE_FIELDS}
    kwargs: dict[str, Any] = {}
    roles: dict[str, dict[str, str]] = {}
    for key, value in sorted(environ.items()):
        if not key.startswith(ENV_PREFIX):
            continue
        name = key[len(ENV_PREFIX) :]
        if name.lower() in fields:
            kwargs[name.lower()] = value
            continue
        for suffix, field in suffixes.items():
            if name.endswith(suffix) and len(name) > len(suffix):
                roles.setdefault(name[: -len(suffix)], {})[field] = value
                break
    if roles:
        kwargs["roles"] = roles
    return kwargs


def api_key(env_name: str) -> str | None:
    """The secret named ``env_name``: the environment first, then Streamlit secrets when the app runs."""
    value = os.environ.get(env_name)
    if not value:
        try:
            import streamlit as st

            value = st.secrets.get(env_name)
        except Exception:  # noqa: BLE001 - no secrets file, or not inside Streamlit: both mean "not set"
            value = None
    # Whatever reads a key registers it, so that an error echoing it is redacted wherever it is written.
    register_secret(value)
    return value


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def runtime_versions() -> dict[str, str | None]:
    """Library and interpreter versions recorded with every run (read from metadata: importing torch is slow)."""
    return {
        "medeval": medeval_core.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": _package_version("torch"),
        "transformers": _package_version("transformers"),
        "openai": _package_version("openai"),
        "streamlit": _package_version("streamlit"),
    }
