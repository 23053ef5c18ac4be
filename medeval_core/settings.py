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
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

import medeval_core
from medeval_core.files import read_json

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG_DIR = PROJECT_ROOT / "configs"
DEFAULT_PROMPTS_DIR = PROJECT_ROOT / "prompts"
DEFAULT_VAR_DIR = PROJECT_ROOT / "var"


class SettingsError(ValueError):
    """A configuration file or environment variable is missing or invalid."""


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
    """DDI judge request and batch-evaluator settings (``configs/ddi_judge.json``)."""

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

    @property
    def configured(self) -> bool:
        return self.backend not in ("none",)


class BackendSettings(_Strict):
    """Model roles (``configs/backends.json``): the tested vision model, the DDI judge, the chat agent."""

    vlm: BackendChoice
    judge: BackendChoice
    chat: BackendChoice


class EnvironmentOverrides(BaseModel):
    """``MEDEVAL_*`` environment variables; each one set replaces the matching file value."""

    model_config = ConfigDict(extra="forbid")

    data_dir: Path | None = None
    db_url: str | None = None
    config_dir: Path | None = None
    vlm_backend: BackendKind | None = None
    vlm_model: str | None = None
    vlm_base_url: str | None = None
    vlm_devices: str | None = None
    judge_backend: BackendKind | None = None
    judge_model: str | None = None
    judge_base_url: str | None = None
    chat_backend: BackendKind | None = None
    chat_model: str | None = None
    chat_base_url: str | None = None


class Settings(_Strict):
    config_dir: Path
    prompts_dir: Path
    data_dir: Path
    db_url: str
    generation: GenerationSettings
    judge: JudgeRequestSettings
    backends: BackendSettings

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


def _apply_backend_overrides(backends: BackendSettings, env: EnvironmentOverrides) -> BackendSettings:
    updated = {}
    for role in ("vlm", "judge", "chat"):
        choice: BackendChoice = getattr(backends, role)
        changes = {
            field: value
            for field in ("backend", "model", "base_url", "devices")
            if (value := getattr(env, f"{role}_{field}", None)) is not None
        }
        # A base URL alone means "use this OpenAI-compatible endpoint": asking for both would be redundant.
        if "base_url" in changes and "backend" not in changes:
            changes["backend"] = "openai"
        updated[role] = choice.model_copy(update=changes)
    return BackendSettings(**updated)


def default_db_url() -> str:
    return f"sqlite:///{DEFAULT_VAR_DIR / 'medeval.db'}"


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read ``configs/`` and apply ``environ`` (the process environment by default).

    Raises ``SettingsError`` with a readable message.
    """
    try:
        env = EnvironmentOverrides.model_validate(_env_kwargs(os.environ if environ is None else environ))
    except ValidationError as exc:
        raise SettingsError(f"A MEDEVAL_* environment variable has an invalid value: {exc}") from exc
    config_dir = (env.config_dir or DEFAULT_CONFIG_DIR).resolve()
    backends = _validated(BackendSettings, config_dir / "backends.json")
    return Settings(
        config_dir=config_dir,
        prompts_dir=DEFAULT_PROMPTS_DIR,
        data_dir=(env.data_dir or DEFAULT_VAR_DIR / "data").resolve(),
        db_url=env.db_url or default_db_url(),
        generation=_validated(GenerationSettings, config_dir / "evaluation.json"),
        judge=_validated(JudgeRequestSettings, config_dir / "ddi_judge.json"),
        backends=_apply_backend_overrides(backends, env),
    )


def _env_kwargs(environ: Mapping[str, str]) -> dict[str, str]:
    prefix = "MEDEVAL_"
    fields = EnvironmentOverrides.model_fields
    return {
        key[len(prefix) :].lower(): value
        for key, value in environ.items()
        if key.startswith(prefix) and key[len(prefix) :].lower() in fields
    }


def api_key(env_name: str) -> str | None:
    """The secret named ``env_name``: the environment first, then Streamlit secrets when the app runs."""
    value = os.environ.get(env_name)
    if value:
        return value
    try:
        import streamlit as st

        return st.secrets.get(env_name)
    except Exception:  # noqa: BLE001 - no secrets file, or not inside Streamlit: both mean "not set"
        return None


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
