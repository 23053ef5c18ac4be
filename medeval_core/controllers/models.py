"""The Models page's controller: the roles and what serves each now, the registered backends, and registering,
testing, choosing the default and removing one (in the store, never a key)."""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from medeval_core import registry
from medeval_core.context import current_settings
from medeval_core.controllers import Outcome
from medeval_core.errors import StoreError
from medeval_core.forms import describe_validation_error
from medeval_core.models.endpoints import EndpointCheck, check_backend
from medeval_core.settings import overriding_variables
from medeval_core.status import backend_status
from medeval_core.store import model_backends, open_store
from medeval_core.store.model_backends import ModelBackend, RegisteredKind

__all__ = ["ModelBackend", "Models", "Outcome", "RoleInUse"]


class RoleInUse(BaseModel):
    """One row of 'In use now': what serves a role and which variables override the page's choice."""

    role: str
    used_by: str
    backend: str
    model: str
    base_url: str
    api_key_env: str
    api_key_set: bool | None
    """None where no key is used (not an OpenAI-compatible endpoint)."""
    set_by_environment: str


class Models:
    """The page's view of the settings and the store, read once per script run."""

    def __init__(self) -> None:
        self.settings = current_settings()
        self.store = open_store(self.settings.db_url)
        self.declared_roles = registry.model_roles()
        """Role name -> the benchmarks that use it."""
        self.roles = list(dict.fromkeys([*self.declared_roles, *self.settings.roles]))
        """Every role a benchmark declares, then those only the settings name."""

    def in_use(self) -> list[RoleInUse]:
        rows = []
        for role in self.roles:
            status = backend_status(role, self.settings.role(role), self.declared_roles.get(role))
            rows.append(RoleInUse(
                role=role, used_by=status.used_by, backend=status.backend, model=status.model,
                base_url=status.base_url or "", api_key_env=status.api_key_env,
                api_key_set=status.api_key_set if status.backend == "openai" else None,
                set_by_environment=", ".join(overriding_variables(role))))
        return rows

    def backends(self) -> list[ModelBackend]:
        return model_backends.list_backends(self.store)

    @staticmethod
    def test(backend: ModelBackend) -> EndpointCheck | None:
        """One cheap request to the backend; None for a backend that needs no check."""
        return check_backend(backend.role, backend.choice())

    def make_default(self, backend: ModelBackend) -> None:
        model_backends.set_default(self.store, backend.id or 0)

    def remove(self, backend: ModelBackend) -> Outcome:
        try:
            model_backends.remove_backend(self.store, backend.id or 0)
        except StoreError as exc:
            return Outcome(error=str(exc))
        return Outcome()

    def register(self, *, role: str, name: str, backend: RegisteredKind, model: str, base_url: str,
                 api_key_env: str, make_default: bool, test_first: bool) -> Outcome:
        """Validate, optionally test with one request, then save; nothing is saved when any step refuses."""
        try:
            candidate = ModelBackend(role=role, name=name.strip(), backend=backend, model=model.strip(),
                                     base_url=base_url or None, api_key_env=api_key_env, is_default=make_default)
        except ValidationError as exc:
            return Outcome(error=f"Not registered: {describe_validation_error(exc)}")
        check = check_backend(candidate.role, candidate.choice()) if test_first else None
        if check is not None and not check.ok:
            return Outcome(error=f"Not registered: {check.message()}")
        try:
            saved = model_backends.register_backend(self.store, candidate)
        except StoreError as exc:
            return Outcome(error=str(exc))
        return Outcome(notice=f"Registered {saved.name} for {saved.role}"
                              + (" as its default." if saved.is_default else ".")
                              + (f" {check.message()}" if check is not None else ""))
