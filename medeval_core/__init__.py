"""medeval core: models, judges, benchmarks, metrics and the store behind the medeval workbench."""

__version__ = "0.1.0"
