"""The signing domain: the one owner of the registry's signed state (docs/tuf.md).

``tuf`` is the TUF repository machinery; the modules beside it are the domain's
operations (proposals, publishing, signing, status, root and keys) and its endpoints.
"""
