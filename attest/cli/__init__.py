"""attest/'s commands: ``modelward bundle ...`` and ``modelward key ...``.

Each command lives in its own module (``bundle_build``, ``bundle_sign``, ``keys`` ...); the
table in ``modelward.cli`` names them, so importing this package imports none of them.
"""
