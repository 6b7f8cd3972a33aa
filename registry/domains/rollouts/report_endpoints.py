"""``POST /v1/repos/{org}/{name}/rollouts/{alias}/reports``: a serving worker's signed
fleet report (docs/rollouts.md#fleet-reports); the checks are ``rollouts.reports``'."""

from __future__ import annotations

from functools import partial

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from modelward.attest.rollout import MAX_REPORT_BYTES
from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import State
from modelward.registry.domains.auth.deps import Worker
from modelward.registry.domains.rollouts import reports
from modelward.registry.errors import RegistryError

router = domain_router(prefix="/v1/repos/{org}/{name}/rollouts", tags=["rollouts"])


@router.post("/{alias}/reports", status_code=201)
async def send_report(
    *, org: str, name: str, alias: str, request: Request, caller: Worker, state: State
) -> JSONResponse:
    """Raw body: the report's DSSE envelope (at most 64 KiB), signed by the caller's own
    registered worker key. 201 ``{id, assigned, cohort, counted}`` (a report of a digest the
    signed step does not assign the key is kept as a fault: ``counted`` false, ``cohort``
    null, ``why``); 400 ``invalid_report``
    (``detail.field``), 403 ``report_untrusted``, 409 ``report_refused`` or
    ``report_replayed``: each refusal audited ``rollout.report.refused``."""
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_REPORT_BYTES:
            await run_in_threadpool(
                reports.refuse_too_large,
                state,
                repo_name=f"{org}/{name}",
                alias=alias,
                caller=caller,
            )
    # answered once the batch it joined is committed (domains._report_queue)
    item = reports.Incoming(f"{org}/{name}", alias, bytes(data), caller)
    outcome = await state.reports.submit(item, partial(reports.ingest, state))
    if isinstance(outcome, RegistryError):
        raise outcome
    return JSONResponse(outcome, status_code=201)
