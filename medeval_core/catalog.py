"""The workbench's pages: one entry per page file. ``app.py`` builds the navigation from it and the home page
describes each entry, so adding a page is one line here."""

from __future__ import annotations

from pydantic import BaseModel


class PageInfo(BaseModel):
    path: str
    title: str
    icon: str
    section: str
    description: str
    url_path: str


HOME = PageInfo(
    path="views/home.py", title="Home", icon=":material/home:", section="medeval", url_path="home",
    description="What medeval does, the state of the store, the data sources and the model backends.",
)

RUNS = PageInfo(
    path="views/runs.py", title="Batch runs", icon=":material/monitoring:", section="Runs", url_path="runs",
    description="Watch, resume and cancel batch runs; per-case metrics with 95% intervals; export; compare two runs "
                "on their shared cases with paired tests.",
)

LESION = PageInfo(
    path="views/lesion_diagnosis.py", title="Lesion diagnosis", icon=":material/dermatology:", section="Benchmarks",
    url_path="lesion",
    description="Upload a skin-lesion image, run the tested vision-language model with the DDI or 23-label prompts, "
                "and see the final diagnosis and the judge's verdict; or judge a pasted answer from another system.",
)

DDXPLUS = PageInfo(
    path="views/ddxplus_walkthrough.py", title="DDXPlus walkthrough", icon=":material/forum:", section="Benchmarks",
    url_path="ddxplus",
    description="Question a simulated DDXPlus patient, give a ranked differential and see the official metrics, "
                "the ground truth beside yours and the evidences you missed; ask what the KB-Bayes agent would do.",
)

PAGES: list[PageInfo] = [HOME, RUNS, LESION, DDXPLUS]
