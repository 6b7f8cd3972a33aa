"""The bundles domain."""
