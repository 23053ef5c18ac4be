"""MEDIQ (Li et al., NeurIPS 2024) under the DynamiCare protocol: interactive multiple-choice questions where the
expert asks a patient system, built from the case's atomic facts, before choosing (design.md §3.4).

This module imports nothing (see ``medeval_core.benchmarks``); it names the CLI and its commands. ``spec`` holds
the spec (light); ``benchmark.py`` is imported when a run is built.
"""

CLI = "medeval_core.benchmarks.mediq.cli:CLI"
COMMANDS = ("score mediq",)
