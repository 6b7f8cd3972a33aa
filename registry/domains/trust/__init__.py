"""Signed decisions: the registry as a TUF repository (docs/tuf.md)."""
