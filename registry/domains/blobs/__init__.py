"""The blobs domain."""
