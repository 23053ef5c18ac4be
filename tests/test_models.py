"""``models.for_role``: one precedence for every role (bundled configs < registered default < environment < the
run's own choice), one "a base URL alone means an OpenAI-compatible endpoint" rule, and one error naming the
role's own variables. Real environment variables, a real SQLite store for the registered defaults, and real
OpenAI-compatible servers on 127.0.0.1 that record which model each request named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from medeval_core import context, registry
from medeval_core.benchmarks.mediq.params import MediqParams
from medeval_core.cli import main
from medeval_core.models import choice_for_role, for_role
from medeval_core.models.chat import ChatBackendError
from medeval_core.models.vlm import VlmNotConfiguredError
from medeval_core.settings import DEFAULT_CONFIG_DIR, Settings, load_settings, role_env_key
from medeval_core.store.model_backends import ModelBackend, register_backend
from tests.fake_openai import FakeOpenAI, Reply

HELLO = [{"role": "user", "content": "hello"}]


def unconfigured(db_url: str) -> Settings:
    """The bundled configs alone: no ``MEDEVAL_<ROLE>_*`` variable, only the test's own store."""
    return load_settings({"MEDEVAL_DB_URL": db_url})


def asked(server: FakeOpenAI) -> list[str]:
    """The model each chat request to ``server`` named, in order."""
    return [request.body["model"] for request in server.chat_requests()]


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The bundled configs plus a gatekeeper endpoint in ``backends.json`` (the first layer)."""
    folder = tmp_path / "configs"
    shutil.copytree(DEFAULT_CONFIG_DIR, folder)
    roles = json.loads((folder / "backends.json").read_text())
    roles["gatekeeper"] = {"backend": "openai", "model": "from-config", "base_url": "http://127.0.0.1:1/v1",
                           "api_key_env": "MEDEVAL_GATEKEEPER_API_KEY"}
    (folder / "backends.json").write_text(json.dumps(roles))
    monkeypatch.setenv("MEDEVAL_CONFIG_DIR", str(folder))
    for field in ("BACKEND", "MODEL", "BASE_URL", "DEVICES", "MAX_TOKENS"):
        monkeypatch.delenv(f"MEDEVAL_GATEKEEPER_{field}", raising=False)
    context.reset()
    return folder


def test_each_layer_overrides_the_one_before(config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    configured = for_role("gatekeeper", context.current_settings())
    assert (configured.base_url, configured.model) == ("http://127.0.0.1:1/v1", "from-config")

    register_backend(context.current_store(), ModelBackend(role="gatekeeper", name="shared", backend="openai",
                                                           model="from-registry", base_url="http://127.0.0.1:2/v1"))
    registered = for_role("gatekeeper", context.current_settings())
    assert (registered.base_url, registered.model) == ("http://127.0.0.1:2/v1", "from-registry")

    with FakeOpenAI(Reply(content="from env")) as env_server, FakeOpenAI(Reply(content="from run")) as run_server:
        monkeypatch.setenv("MEDEVAL_GATEKEEPER_BASE_URL", env_server.url)
        context.reset()
        settings = context.current_settings()
        # The variable sets the endpoint only: the model is still the registered default's.
        assert for_role("gatekeeper", settings).complete(HELLO) == "from env"
        assert asked(env_server) == ["from-registry"]

        # The run's own choice wins over the variable, field by field.
        assert for_role("gatekeeper", settings, {"model": "from-run"}).complete(HELLO) == "from env"
        assert asked(env_server) == ["from-registry", "from-run"]
        chosen = for_role("gatekeeper", settings, {"base_url": run_server.url})
        assert chosen.complete(HELLO) == "from run" and asked(run_server) == ["from-registry"]


def test_a_base_url_alone_means_an_openai_compatible_endpoint_at_every_layer(monkeypatch: pytest.MonkeyPatch,
                                                                              isolated_store: str) -> None:
    with FakeOpenAI(Reply(content="answer")) as server:
        monkeypatch.setenv("MEDEVAL_PATIENT_BASE_URL", server.url)
        monkeypatch.setenv("MEDEVAL_PATIENT_MODEL", "patient-model")
        settings = load_settings()
        assert settings.role("patient").backend == "openai"
        assert for_role("patient", settings).complete(HELLO) == "answer"
    # The bundled judge role is "offline": a run that names only an endpoint gets that endpoint.
    offline = unconfigured(isolated_store)
    assert offline.role("judge").backend == "offline"
    assert choice_for_role("judge", offline, {"base_url": "http://127.0.0.1:9/v1"}).backend == "openai"
    request = offline.judge_settings("ddi")
    assert for_role("judge", offline, interface="judge", request=request) is None  # the offline stand-in
    client = for_role("judge", offline, {"base_url": "http://127.0.0.1:9/v1", "model": "m"}, interface="judge",
                      request=request)
    assert client is not None and (client.base_url, client.model, client.role) == ("http://127.0.0.1:9/v1", "m",
                                                                                   "judge")


@pytest.mark.parametrize("role", ["gatekeeper", "sdbench-judge", "expert", "patient", "coder"])
def test_an_unserved_role_names_its_own_variables(role: str, isolated_store: str) -> None:
    key = role_env_key(role)
    with pytest.raises(ChatBackendError) as refused:
        for_role(role, unconfigured(isolated_store))
    message = str(refused.value)
    assert message.startswith(f"No {role} model is configured")
    assert f"MEDEVAL_{key}_BASE_URL" in message and f"MEDEVAL_{key}_MODEL" in message
    assert f"MEDEVAL_{key}_API_KEY" in message and "MEDEVAL_CHAT_" not in message


def test_the_vision_role_also_offers_a_local_checkpoint(isolated_store: str) -> None:
    with pytest.raises(VlmNotConfiguredError) as refused:
        for_role("vlm", unconfigured(isolated_store), interface="vision")
    message = str(refused.value)
    assert "MEDEVAL_VLM_BASE_URL" in message and "MEDEVAL_VLM_BACKEND=transformers" in message


def test_the_cli_refuses_an_unserved_gatekeeper_naming_its_variables(tmp_path: Path, capsys) -> None:
    cases = tmp_path / "cases.jsonl"
    cases.write_text("")
    assert main(["run", "sdbench", "--cases", str(cases), "--agent", "replay", "--actions", str(cases),
                 "--gatekeeper", "llm"]) == 2
    err = capsys.readouterr().err
    assert "MEDEVAL_GATEKEEPER_BASE_URL" in err and "MEDEVAL_GATEKEEPER_MODEL" in err
    assert "MEDEVAL_CHAT_" not in err and err.count("\n") == 1


def test_an_older_runs_stored_models_are_still_its_own_choice(tmp_path: Path, isolated_store: str) -> None:
    """Runs stored before the roles' backends were kept only in the run's settings named them in ``models``."""
    settings = unconfigured(isolated_store)
    assert settings.role("expert").backend == "none"
    with FakeOpenAI(Reply(content="kept")) as server:
        stored = MediqParams(cases=str(tmp_path / "cases.jsonl"), expert="llm",
                             models={"expert": {"base_url": server.url, "model": "started-with"}})
        expert = registry.benchmark("mediq").models(stored, settings)["expert"]()
        assert expert.complete(HELLO) == "kept" and asked(server) == ["started-with"]
