"""One package per domain: thin endpoints, a service, small schemas."""
