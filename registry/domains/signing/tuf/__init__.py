"""The registry as a TUF repository (docs/tuf.md): the signing domain's machinery.

``roles`` lays out the delegations; ``repository`` makes and verifies new versions of
roles; ``store`` keeps the metadata files; ``proposals`` collects signatures on the next
version of a role; ``bootstrap`` opens the repository and keeps the delegations as wanted.
These modules import no other domain, so any domain may use them (pyproject.toml's
import contracts).
"""
