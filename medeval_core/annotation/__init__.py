"""Clinician annotation (design.md §3.5): annotator accounts and sign-in (``accounts``), tasks built from stored
runs with blinding and balanced side randomisation (``items``, ``tasks``), each annotator's queue and append-only
answers (``answers``), and the administrator's statistics and export (``report``). ``gate`` is the sign-in that
every annotation page shows first."""
