"""The attestations domain."""
