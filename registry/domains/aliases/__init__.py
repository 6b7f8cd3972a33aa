"""The aliases domain."""
