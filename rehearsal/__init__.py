"""Rehearsal without GPUs: a small local fleet of real workers serving a bundle with a
stand-in engine (docs/rollouts.md#rehearsal).

- ``fleet``: enrols N workers (a reader principal, a token and a registered worker key
  each) and runs them until stopped;
- ``worker``: one worker, ``loader.follow.Follower`` with ``StandinLauncher``: real TUF
  resolution, real pulls and verification, real signed reports;
- ``standin_engine``: the engine, an HTTP server with vLLM's metric names whose latency
  and error rate you set.

Run as ``python -m modelward.rehearsal fleet|worker ...``. Nothing in the ``modelward``
command, the loader or the registry imports this package (``boot`` cannot start a
stand-in): tests/rehearsal/test_rehearsal.py checks it.
"""
