"""Open diagnosis in the DynamiCare style (Shang et al. 2025, arXiv 2507.02616): a doctor (LLM, the DynamiCare
team, replay or a person) questions a patient simulated from a record, returns up to 10 ranked diagnoses, and is
scored with Hit@K / Rec@K on ICD-9 categories (design.md §3.4).

This module imports nothing (see ``medeval_core.benchmarks``); it names the CLI and its commands. ``spec`` holds
the spec (light); ``benchmark.py`` is imported when a run is built.
"""

CLI = "medeval_core.benchmarks.dynamicare.cli:CLI"
COMMANDS = ("score hitk", "import-agentclinic", "import-records")
