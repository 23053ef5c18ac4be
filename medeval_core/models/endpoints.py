"""Before a launch (and on the Models page): each configured model backend checked with one cheap request.

An OpenAI-compatible endpoint gets one chat completion of one output token (what a run's first call would do,
so a wrong model name, a refused key or a closed port all show up); a local checkpoint folder is checked for the
files a Qwen2.5-VL load reads, without loading it. The result carries the endpoint's own error and what to set.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel

from medeval_core.settings import BackendChoice, Settings, api_key, role_env_key

PROBE_TIMEOUT_S = 20.0
CHECKPOINT_FILES = ("config.json",)


class EndpointCheck(BaseModel):
    """One role's check: whether it answered, how long it took, and when not, the endpoint's error and the fix."""

    role: str
    backend: str
    model: str
    base_url: str | None
    ok: bool
    latency_s: float | None = None
    error: str = ""
    fix: str = ""

    def message(self) -> str:
        """One sentence for the page or the command line."""
        where = self.base_url or self.model
        if self.ok:
            return f"{self.role}: {self.model} at {where} answered in {self.latency_s or 0:.2f} s."
        return f"{self.role}: {where} failed ({self.error}); {self.fix}"


def _fix_for(role: str, choice: BackendChoice) -> str:
    key = role_env_key(role)
    return (f"set MEDEVAL_{key}_BASE_URL (ending in /v1) and MEDEVAL_{key}_MODEL to a serving endpoint, or pick "
            f"another backend for the {role} role on the Models page; the key goes in {choice.api_key_env}.")


def check_openai(role: str, choice: BackendChoice, timeout_s: float = PROBE_TIMEOUT_S) -> EndpointCheck:
    """One chat completion of one token to ``choice``'s endpoint, no retries."""
    import openai

    base = EndpointCheck(role=role, backend=choice.backend, model=choice.model, base_url=choice.base_url, ok=False)
    if not choice.base_url or not choice.model:
        return base.model_copy(update={"error": "no base URL or model is set", "fix": _fix_for(role, choice)})
    client = openai.OpenAI(base_url=choice.base_url, api_key=api_key(choice.api_key_env) or "unused",
                           timeout=timeout_s, max_retries=0)
    started = time.monotonic()
    try:
        client.chat.completions.create(model=choice.model, messages=[{"role": "user", "content": "ping"}],
                                       max_tokens=1, temperature=0)
    except openai.AuthenticationError as exc:
        return base.model_copy(update={
            "error": f"HTTP {exc.status_code}: {exc.message}",
            "fix": f"set {choice.api_key_env} to a valid key for {choice.base_url} (environment or Streamlit "
                   "secrets)."})
    except openai.NotFoundError as exc:
        return base.model_copy(update={
            "error": f"HTTP {exc.status_code}: {exc.message}",
            "fix": f"check that {choice.base_url} ends with /v1 and serves the model {choice.model!r}."})
    except openai.APIStatusError as exc:
        return base.model_copy(update={"error": f"HTTP {exc.status_code}: {exc.message}",
                                       "fix": _fix_for(role, choice)})
    except openai.APIConnectionError as exc:
        cause = exc.__cause__ or exc
        return base.model_copy(update={"error": f"{type(cause).__name__}: {cause}",
                                       "fix": f"start the server at {choice.base_url}, or " + _fix_for(role, choice)})
    return base.model_copy(update={"ok": True, "latency_s": time.monotonic() - started})


def check_checkpoint(role: str, choice: BackendChoice) -> EndpointCheck:
    """A local checkpoint folder: present, with the files a load reads first."""
    base = EndpointCheck(role=role, backend=choice.backend, model=choice.model, base_url=None, ok=False)
    folder = Path(choice.model) if choice.model else None
    key = role_env_key(role)
    fix = (f"set MEDEVAL_{key}_MODEL to a Qwen2.5-VL checkpoint folder (with config.json and the safetensors "
           "shards), or register one on the Models page.")
    if folder is None or not folder.is_dir():
        return base.model_copy(update={"error": f"{choice.model or 'no folder'} is not a folder", "fix": fix})
    missing = [name for name in CHECKPOINT_FILES if not (folder / name).is_file()]
    if missing or not any(folder.glob("*.safetensors")):
        what = ", ".join(missing) if missing else "no *.safetensors weights"
        return base.model_copy(update={"error": f"{folder} lacks {what}", "fix": fix})
    return base.model_copy(update={"ok": True, "latency_s": 0.0})


def check_backend(role: str, choice: BackendChoice) -> EndpointCheck | None:
    """The check for one role's backend; None for backends that need none (offline rules, not configured)."""
    if choice.backend == "openai":
        return check_openai(role, choice)
    if choice.backend == "transformers":
        return check_checkpoint(role, choice)
    return None


def check_roles(settings: Settings, roles: Iterable[str]) -> list[EndpointCheck]:
    """Every configured backend among ``roles``, one request each, in order."""
    checks = []
    for role in dict.fromkeys(roles):
        check = check_backend(role, settings.role(role))
        if check is not None:
            checks.append(check)
    return checks
