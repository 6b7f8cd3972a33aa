"""Quarantine: a digest unloadable everywhere and unassignable to aliases (service.py)."""
