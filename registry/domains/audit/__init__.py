"""The audit domain."""
