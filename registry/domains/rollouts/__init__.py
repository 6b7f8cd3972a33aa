"""Rollouts: a signed plan and online-signed steps (docs/rollouts.md)."""
