"""The orgs domain."""
