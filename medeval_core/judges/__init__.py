"""Judges that score free-text model outputs against a reference (DDI final-diagnosis equivalence)."""
