"""Judges of free-text model outputs: the shared attempt records (``base``), an LLM judge client over any
OpenAI-compatible endpoint with retries and a shared rate budget (``openai_judge``, ``ratelimit``), and offline
diagnosis-equivalence rules (``offline``). A benchmark brings its own prompt, verdict and settings."""
