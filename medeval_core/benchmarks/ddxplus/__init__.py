"""DDXPlus (Fansi Tchango et al., NeurIPS 2022): KB, patients, simulator, agents, runs. See design.md §3.2.

This module imports nothing (see ``medeval_core.benchmarks``); it names the CLI and its commands. ``spec`` holds
the benchmark's spec (light: no numpy, pandas or model imports), so that the CLI and the app start fast;
``benchmark.py`` is imported when a DDXPlus run is built.
"""

CLI = "medeval_core.benchmarks.ddxplus.cli:CLI"
COMMANDS = ("score ddxplus",)
