"""A ``ddi`` run's parameters: one stage per run, discriminated on ``stage`` and stored whole with the run.

- ``model`` (``GenerateParams``): the tested model generates a response for every image of a case source.
- ``responses`` (``ResponsesParams``): the responses of another system, read from a JSON Lines file, become the
  run's outputs (a fast import), so that they can be judged by a score run exactly like generated ones.
- ``interactive`` (``SessionParams``): one evaluation of the lesion page (a session run).

Judging is never a stage: the LLM or offline judge, or the exact-label scorer, runs as a score run over a stored
model or responses run (``service.score_run``), so a second judge can score the same outputs again.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, RootModel

from medeval_core.benchmark import RunParams
from medeval_core.benchmarks.ddi.cases import CaseSource
from medeval_core.benchmarks.ddi.tasks import Mode
from medeval_core.models.vlm import VlmPrompt
from medeval_core.settings import GenerationSettings

VlmBackendName = Literal["transformers", "openai"]


class GenerateParams(RunParams):
    """The model stage: which images, which model, the effective generation settings and the exact prompt."""

    stage: Literal["model"] = "model"
    mode: Mode = "open"
    source: CaseSource
    labels: list[str] | None = Field(default=None, description="candidate labels (classification)")
    model_backend: VlmBackendName
    model: str
    base_url: str | None = None
    generation: GenerationSettings
    prompt: VlmPrompt


class ResponsesParams(RunParams):
    """Responses produced elsewhere (image_id, reference, response per line), imported as a run's outputs."""

    stage: Literal["responses"] = "responses"
    mode: Mode = "open"
    responses_file: str
    labels: list[str] | None = None


class SessionParams(RunParams):
    """One lesion-page evaluation (a session run): what the model was asked, when a model answered."""

    # Made by the lesion page only: the "New run" form does not offer it.
    model_config = ConfigDict(json_schema_extra={"launchable": False})

    stage: Literal["interactive"] = "interactive"
    mode: Mode = "open"
    labels: list[str] | None = None
    session_id: str | None = None
    model_backend: VlmBackendName | None = None
    model: str | None = None
    generation: GenerationSettings | None = None
    prompt: VlmPrompt | None = None


StageParams = Annotated[GenerateParams | ResponsesParams | SessionParams, Field(discriminator="stage")]


class DdiParams(RootModel[StageParams]):
    """The benchmark's one ``Params`` type: the stage's parameters as its root (dumped as the stage's fields, so
    a stored run's ``params`` read the same as the stage's). ``concurrency`` and ``repetitions`` are the stage's."""

    @property
    def concurrency(self) -> int:
        return self.root.concurrency

    @property
    def repetitions(self) -> int:
        return self.root.repetitions

    @property
    def mode(self) -> Mode:
        return self.root.mode

    @property
    def labels(self) -> list[str] | None:
        return self.root.labels
