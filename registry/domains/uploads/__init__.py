"""The uploads domain."""
