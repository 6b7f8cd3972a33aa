"""The registry as a TUF repository: alias decisions as signed metadata (docs/tuf.md).

``roles`` lays out the delegations; ``repository`` makes and verifies new versions of
roles; ``store`` keeps the metadata files.
"""
