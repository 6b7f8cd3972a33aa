"""Storage hygiene: garbage collection of unreferenced blobs and abandoned uploads, and
per-repository quotas (docs/registry.md#storage-hygiene)."""
