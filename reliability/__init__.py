"""Reliability campaigns for modelward (issue 15; docs/reliability.md).

Four campaigns, each a module with a ``run(scale, out)`` entry point and a smoke scale that
``make test`` runs through tests/reliability:

- ``reliability.fuzz``: coverage-guided fuzzing (atheris) of every parser of untrusted bytes;
- ``reliability.api_fuzz``: schemathesis over the registry's OpenAPI schema, as every role;
- ``reliability.crash``: ``kill -9`` of the server during writes, on SQLite and PostgreSQL;
- ``reliability.contention``: many writers racing compare-and-swap on one alias.

``python -m reliability [fuzz|api|crash|contention|all] --scale full`` runs them
(``make reliability``); results go to ``build/reliability/`` as JSON.
"""
