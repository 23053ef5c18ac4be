"""DDI open-ended lesion diagnosis and candidate-label classification (SkinGPT-R1 evaluation settings).

``spec`` holds the benchmark's light spec. ``cases`` loads images and references, ``images`` validates image
files, ``tasks`` builds the prompts and maps classification answers to labels, ``params`` holds a run's stages,
``benchmark`` implements the interfaces (model and responses runs, the judge and exact-label scorers), ``summary``
summarises a run, ``interactive`` serves the lesion page (a session per evaluation), ``sources`` declares the DDI
and ISIC data sources, ``reported`` recomputes the document's reported figures from their counts, and ``cli`` adds
the ``run ddi`` options, ``judge ddi`` and ``check-reported`` (``reported_cli``).

This module imports nothing (see ``medeval_core.benchmarks``); it names the roles, the CLI and its commands.
"""

VLM_ROLE = "vlm"
JUDGE_ROLE = "judge"

CLI = "medeval_core.benchmarks.ddi.cli:CLI"
COMMANDS = ("judge ddi", "check-reported")
