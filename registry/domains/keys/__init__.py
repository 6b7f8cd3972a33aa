"""The keys domain."""
