"""The auth domain."""
