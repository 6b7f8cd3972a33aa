"""The principals domain."""
