"""The repos domain."""
