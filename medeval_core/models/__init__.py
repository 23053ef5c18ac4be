"""One way to get a model for a role: ``for_role(role, settings)`` (design.md §2).

Which backend serves a role is decided here only, with one precedence, each layer over the one before:

1. the bundled ``configs/backends.json`` (and, for a judge's endpoint and model, its ``configs/<name>_judge.json``);
2. the role's default registered on the Models page (``store.model_backends``);
3. the ``MEDEVAL_<ROLE>_*`` environment variables (``settings.role_env_key`` names the role in them);
4. the run's own choice: a command-line flag, the launcher's pick, or what an older stored run recorded.

``load_settings`` applies layers 1-3 (``Settings.role``); ``choice_for_role`` adds layer 4 with the environment's
rule (``RoleOverride``): a base URL alone means an OpenAI-compatible endpoint. A run stores the outcome once, as
its settings' ``roles`` (``with_role``), and a resume reads it back from there (``service.run_settings``).
A role nobody configured fails with one sentence naming that role's own variables (``not_configured``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, overload

from medeval_core.settings import (
    BackendChoice,
    JudgeRequestSettings,
    RoleOverride,
    Settings,
    SettingsError,
    api_key,
    role_env_key,
)

if TYPE_CHECKING:
    from medeval_core.judges.openai_judge import OpenAIJudgeClient
    from medeval_core.models.chat import ChatBackend
    from medeval_core.models.vlm import VlmBackend

Interface = Literal["chat", "vision", "judge"]
"""What a role's backend does: text chat, images plus text (a local checkpoint or an endpoint), or judging with
a judge's own request settings (an endpoint, or none for the offline stand-in)."""

RunChoice = BackendChoice | RoleOverride | Mapping[str, Any] | None
"""Layer 4: the fields a run sets itself (``backend``, ``model``, ``base_url``...); unset fields keep layers 1-3."""


def choice_for_role(role: str, settings: Settings, run_choice: RunChoice = None) -> BackendChoice:
    """The backend serving ``role``: the settings' (configs < registered default < environment), then the run's
    own choice over it."""
    choice = settings.role(role)
    if run_choice is None:
        return choice
    if isinstance(run_choice, BackendChoice):
        return run_choice
    override = run_choice if isinstance(run_choice, RoleOverride) else RoleOverride.model_validate(
        {key: value for key, value in run_choice.items() if value is not None})
    return choice.model_copy(update=override.changes())


def with_role(settings: Settings, role: str, choice: BackendChoice) -> Settings:
    """``settings`` with ``choice`` serving ``role``: what a run stores as its one record of the role's backend."""
    key = role_env_key(role)
    roles = {name: value for name, value in settings.roles.items() if role_env_key(name) != key}
    return settings.model_copy(update={"roles": {**roles, role: choice}})


def is_served(choice: BackendChoice, interface: Interface = "chat") -> bool:
    """Whether ``choice`` names a backend that can answer: an endpoint with a model, or (vision) a checkpoint."""
    if choice.backend == "openai":
        return bool(choice.base_url and choice.model)
    return interface == "vision" and choice.backend == "transformers" and bool(choice.model)


def not_configured(role: str, choice: BackendChoice, interface: Interface = "chat") -> str:
    """The one sentence for a role no backend serves, naming the role's own variables."""
    key = role_env_key(role)
    local = (f", or MEDEVAL_{key}_BACKEND=transformers and MEDEVAL_{key}_MODEL=/path/to/checkpoint (a Qwen2.5-VL "
             "folder with config.json and safetensors shards) for a local checkpoint") if interface == "vision" else ""
    return (f"No {role} model is configured: set MEDEVAL_{key}_BASE_URL (an OpenAI-compatible endpoint such as vLLM "
            f"or Ollama, ending in /v1) and MEDEVAL_{key}_MODEL (the served model name){local}, with the key in "
            f"{choice.api_key_env} if the endpoint needs one, or register a backend for the {role} role on the "
            "Models page.")


def require_served(settings: Settings, roles: Iterable[str], interface: Interface = "chat",
                   error: Callable[[str], Exception] = SettingsError) -> None:
    """Refuse, before a run starts, a role among ``roles`` that no backend serves: ``error`` with the sentence
    naming that role's own variables."""
    for role in roles:
        choice = settings.role(role)
        if not is_served(choice, interface):
            raise error(not_configured(role, choice, interface))


@overload
def for_role(role: str, settings: Settings, run_choice: RunChoice = None, *, interface: Literal["chat"] = "chat",
             **options: Any) -> ChatBackend: ...


@overload
def for_role(role: str, settings: Settings, run_choice: RunChoice = None, *, interface: Literal["vision"],
             **options: Any) -> VlmBackend: ...


@overload
def for_role(role: str, settings: Settings, run_choice: RunChoice = None, *, interface: Literal["judge"],
             request: JudgeRequestSettings, **options: Any) -> OpenAIJudgeClient | None: ...


def for_role(role: str, settings: Settings, run_choice: RunChoice = None, *, interface: Interface = "chat",
             **options: Any) -> Any:
    """The backend serving ``role`` (see the module docstring for where it comes from). ``options`` go to the
    backend (a chat role's ``request_options``, a judge's ``request`` settings). A chat or vision role nobody
    serves raises the backend's own error with ``not_configured``'s sentence; a judge role with no endpoint
    (``offline`` or unset) gives None: the caller uses its offline stand-in."""
    choice = choice_for_role(role, settings, run_choice)
    if interface == "judge":
        return _judge_client(role, choice, settings, **options)
    if interface == "vision":
        return _vision_backend(role, choice, settings)
    from medeval_core.models.chat import ChatBackendError, OpenAIChatBackend

    if not is_served(choice, "chat"):
        raise ChatBackendError(not_configured(role, choice))
    if choice.max_tokens is not None:
        options = {"max_tokens": choice.max_tokens, **options}
    assert choice.base_url is not None  # is_served checked it
    return OpenAIChatBackend(base_url=choice.base_url, model=choice.model, api_key_env=choice.api_key_env, **options)


def _vision_backend(role: str, choice: BackendChoice, settings: Settings) -> VlmBackend:
    from medeval_core.models.vlm import VlmNotConfiguredError

    if not is_served(choice, "vision"):
        raise VlmNotConfiguredError(not_configured(role, choice, "vision"))
    if choice.backend == "transformers":
        from medeval_core.models.qwen_transformers import QwenTransformersBackend

        return QwenTransformersBackend(choice.model, settings.generation, devices=choice.devices)
    from medeval_core.models.openai_vision import OpenAIVisionBackend

    assert choice.base_url is not None  # is_served checked it
    return OpenAIVisionBackend(base_url=choice.base_url, model=choice.model, api_key_env=choice.api_key_env)


def _judge_client(role: str, choice: BackendChoice, settings: Settings, *,
                  request: JudgeRequestSettings, **options: Any) -> OpenAIJudgeClient | None:
    """The judge's endpoint, model and key: the role's, else the judge settings' own (layer 1). The settings'
    own endpoint is a hosted API that needs a key; any other (vLLM, Ollama) accepts none."""
    if choice.backend in ("offline", "none"):
        return None
    if choice.backend != "openai":
        raise SettingsError(f"The {role} role cannot use the {choice.backend!r} backend; choose 'offline' or "
                            f"'openai' (MEDEVAL_{role_env_key(role)}_BACKEND).")
    url = choice.base_url or request.base_url
    key = api_key(choice.api_key_env)
    if not key:
        if url.rstrip("/") == request.base_url.rstrip("/"):
            raise SettingsError(
                f"The {role} endpoint {url} needs an API key: set the environment variable {choice.api_key_env}, "
                "or use the offline judge (--judge offline)."
            )
        key = "EMPTY"  # the SDK insists on a key; local servers accept any
    from medeval_core.judges.openai_judge import OpenAIJudgeClient
    from medeval_core.store import open_store

    return OpenAIJudgeClient(request=request, base_url=url, model=choice.model or request.model, api_key=key,
                             store=open_store(settings.db_url), role=role, **options)
