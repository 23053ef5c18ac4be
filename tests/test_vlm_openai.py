"""The OpenAI-compatible vision backend against a real local HTTP server."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from medeval_core.models import for_role
from medeval_core.models.openai_vision import OpenAIVisionBackend, request_parameters
from medeval_core.models.vlm import (
    VlmBackendError,
    VlmNotConfiguredError,
    VlmPrompt,
    greedy_settings,
)
from medeval_core.settings import GenerationSettings, load_settings
from tests.fake_openai import FakeOpenAI, Reply, Script


@pytest.fixture
def generation() -> GenerationSettings:
    return load_settings().generation


def image(seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, size=(40, 60, 3), dtype=np.uint8))


def backend_for(server: FakeOpenAI, **kwargs: float) -> OpenAIVisionBackend:
    return OpenAIVisionBackend(base_url=server.url, model="skin-vlm", api_key_env="MEDEVAL_TEST_VLM_KEY",
                               retry_initial_s=0.01, retry_max_s=0.05, **kwargs)


def test_image_goes_as_data_url_with_the_prompts_and_sampling(
    generation: GenerationSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEDEVAL_TEST_VLM_KEY", "secret-key-123")
    picture = image(1)
    prompt = VlmPrompt(system="You are a dermatology assistant.", user="Analyze the dermatologic image.")
    with FakeOpenAI(Reply(content="Final diagnosis: melanoma")) as server:
        texts = backend_for(server).generate([picture], [prompt], generation)
    assert texts == ["Final diagnosis: melanoma"]
    (request,) = server.chat_requests()
    body = request.body
    assert request.headers["authorization"] == "Bearer secret-key-123"
    assert body["model"] == "skin-vlm"
    assert body["messages"][0] == {"role": "system", "content": [{"type": "text", "text": prompt.system}]}
    image_part, text_part = body["messages"][1]["content"]
    assert text_part == {"type": "text", "text": prompt.user}
    url = image_part["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    decoded = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert np.array_equal(np.asarray(decoded), np.asarray(picture))  # lossless: the server sees the same pixels
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (0.7, 0.9, 4096, 42)
    assert "repetition_penalty" not in body


def test_greedy_sends_temperature_zero_without_top_p(generation: GenerationSettings) -> None:
    parameters = request_parameters(greedy_settings(generation))
    assert parameters == {"max_tokens": generation.max_new_tokens, "seed": generation.seed, "temperature": 0.0}


def test_classification_prompt_has_no_system_message_and_the_reference_never_appears(
    generation: GenerationSettings,
) -> None:
    reference = "basal-cell-carcinoma-nodular"
    prompts = [VlmPrompt(user="Choose exactly one diagnosis from:\nMelanoma"), VlmPrompt(user="Analyze the image.")]
    with FakeOpenAI(Reply(content="Melanoma")) as server:
        backend_for(server).generate([image(2), image(3)], prompts, generation)
    requests = server.chat_requests()
    assert len(requests) == 2
    assert all(r.body["messages"][0]["role"] == "user" for r in requests)
    assert all(reference not in str(r.body) for r in requests)


def test_transient_errors_are_retried_then_succeed(generation: GenerationSettings) -> None:
    script = Script({"retry-me": [Reply(status=429), Reply(status=503), Reply(status=500)]},
                    default=Reply(content="Psoriasis"))
    with FakeOpenAI(script) as server:
        texts = backend_for(server).generate([image(4)], [VlmPrompt(user="retry-me")], generation)
    assert texts == ["Psoriasis"]
    assert [r.reply.status for r in server.chat_requests()] == [429, 503, 500, 200]


def test_retries_stop_and_the_error_says_what_happened(generation: GenerationSettings) -> None:
    with FakeOpenAI(Reply(status=503)) as server, pytest.raises(VlmBackendError, match="HTTP 503"):
        backend_for(server, max_attempts=3).generate([image(5)], [VlmPrompt(user="x")], generation)
    assert len(server.chat_requests()) == 3


def test_client_errors_are_not_retried(generation: GenerationSettings) -> None:
    with FakeOpenAI(Reply(status=400)) as server, pytest.raises(VlmBackendError, match="HTTP 400"):
        backend_for(server).generate([image(6)], [VlmPrompt(user="x")], generation)
    assert len(server.chat_requests()) == 1


def test_unreachable_server_is_a_clear_error(generation: GenerationSettings) -> None:
    with FakeOpenAI() as server:
        url = server.url
    backend = OpenAIVisionBackend(base_url=url, model="m", api_key_env="X", max_attempts=2, retry_initial_s=0.01,
                                  retry_max_s=0.02, timeout_s=2)
    with pytest.raises(VlmBackendError, match="Could not reach"):
        backend.generate([image(7)], [VlmPrompt(user="x")], generation)


def test_batch_answers_come_back_in_order(generation: GenerationSettings) -> None:
    def echo(request):
        return Reply(content=request.text().split("case=")[1])

    prompts = [VlmPrompt(user=f"case={i}") for i in range(5)]
    with FakeOpenAI(echo) as server:
        texts = backend_for(server).generate([image(i) for i in range(5)], prompts, generation)
    assert texts == [str(i) for i in range(5)]


def test_factory_picks_the_endpoint_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDEVAL_VLM_BASE_URL", "http://127.0.0.1:9/v1")
    with pytest.raises(VlmNotConfiguredError, match="model name"):
        for_role("vlm", load_settings(), interface="vision")
    monkeypatch.setenv("MEDEVAL_VLM_MODEL", "qwen2.5-vl")
    backend = for_role("vlm", load_settings(), interface="vision")
    assert isinstance(backend, OpenAIVisionBackend)
    assert backend.describe()["base_url"] == "http://127.0.0.1:9/v1"
    explicit = for_role("vlm", load_settings(), {"backend": "openai", "model": "other",
                                                 "base_url": "http://127.0.0.1:8/v1"}, interface="vision")
    assert (explicit.model, explicit.base_url) == ("other", "http://127.0.0.1:8/v1")
