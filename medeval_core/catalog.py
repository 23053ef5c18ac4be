"""The workbench's pages: the core pages (home, runs) and every page a benchmark's spec declares. ``app.py``
builds the navigation from ``pages()`` and the home page describes each entry, so a benchmark's pages appear by
adding its package, with no edit here."""

from __future__ import annotations

from medeval_core import registry
from medeval_core.registry import PageInfo

HOME = PageInfo(
    path="pages/home.py", title="Home", icon=":material/home:", section="medeval", url_path="home",
    description="What medeval does, the state of the store, the data sources and the model backends.",
)

RUNS = PageInfo(
    path="pages/runs.py", title="Batch runs", icon=":material/monitoring:", section="Runs", url_path="runs",
    description="Every run with its status and headline metric; watch, resume and cancel; per-case table and "
                "drill-down; plots across runs; compare two runs with paired tests; HTML report and exports.",
)

ANNOTATE = PageInfo(
    path="pages/annotate.py", title="Annotate", icon=":material/rate_review:", section="Annotation",
    url_path="annotate",
    description="Sign in and work through your queue: blinded pairwise preferences, simulated-patient answer "
                "ratings and judge reviews, one click per judgement.",
)

ANNOTATION_TASKS = PageInfo(
    path="pages/annotation_tasks.py", title="Annotation tasks", icon=":material/assignment:", section="Annotation",
    url_path="annotation-tasks",
    description="Administrators: build annotation tasks from stored runs and assign them with overlap.",
)

ANNOTATION_RESULTS = PageInfo(
    path="pages/annotation_results.py", title="Annotation results", icon=":material/fact_check:",
    section="Annotation", url_path="annotation-results",
    description="Administrators: win rates with Wilson intervals, agreement (Cohen's kappa, Krippendorff's alpha), "
                "judge-versus-clinician agreement, patient-answer ratings, CSV export.",
)

ANNOTATION_PAGES: tuple[PageInfo, ...] = (ANNOTATE, ANNOTATION_TASKS, ANNOTATION_RESULTS)
ANNOTATOR_PAGES: tuple[PageInfo, ...] = (ANNOTATE,)
"""All a signed-in clinician (not an administrator) is shown: the other pages name runs and models."""


NEW_RUN = PageInfo(
    path="pages/new_run.py", title="New run", icon=":material/play_circle:", section="Runs", url_path="new-run",
    description="Launch a batch run of any benchmark from a form built from its parameters; it is validated, "
                "estimated and its endpoints checked first, then it runs in a worker process outside the page.",
)

MODELS = PageInfo(
    path="pages/models.py", title="Models", icon=":material/neurology:", section="medeval", url_path="models",
    description="Register model backends per role (an OpenAI-compatible endpoint, or a local Qwen2.5-VL "
                "checkpoint), test each with one request, and choose the default per role.",
)

CORE_PAGES: tuple[PageInfo, ...] = (HOME, MODELS, NEW_RUN, RUNS, *ANNOTATION_PAGES)


def pages() -> list[PageInfo]:
    return [*CORE_PAGES, *registry.pages()]
