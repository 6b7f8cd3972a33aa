"""The registry's small mechanisms, written once for every domain (docs/architecture.md):

- ``logs.log_failure``: the one JSON log line of a failure (event, context, exception type,
  message cut short; never a traceback, which may quote a payload);
- ``periodic.Periodic``: a job every N seconds until a stop event (``run`` here, or
  ``start`` on a thread),
  each failure logged and the next run kept;
- ``utc.UtcDateTime``: the one timestamp column type; the database hands back aware UTC.

(The one lookup of a principal by name is ``domains/_principals.py``: it reads the models,
which import this kit.)

Nothing here imports a domain.
"""
