"""``modelward webhook add|list|remove|disable|enable|rotate|deliveries|redeliver|test``:
signed webhooks for rollout events, admins only (docs/webhooks.md)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from modelward.cli.remote import AsJson, emit, registry_client, reported

__all__ = [
    "webhook_add",
    "webhook_app",
    "webhook_deliveries",
    "webhook_disable",
    "webhook_enable",
    "webhook_list",
    "webhook_redeliver",
    "webhook_remove",
    "webhook_rotate",
    "webhook_test",
]

webhook_app = typer.Typer(
    name="webhook",
    help="Signed webhooks for rollout events, Standard Webhooks (docs/webhooks.md); admins.",
    no_args_is_help=True,
)

EndpointArg = Annotated[int, typer.Argument(metavar="ID", help="The endpoint's id", min=1)]


def _endpoint_line(e: Any) -> str:
    failing = f"  failing since {e['failing_since']}" if e.get("failing_since") else ""
    return f"{e['id']:>4}  {e['state']:<8}  {e['url']}  [{', '.join(e['events'])}]{failing}"


def _with_secret(e: Any) -> str:
    return (
        f"{_endpoint_line(e)}\n"
        f"secret: {e['secret']}\n"
        "(shown once: give it to the receiver, which verifies every delivery with it)"
    )


@webhook_app.command("add")
def webhook_add(
    url: Annotated[str, typer.Argument(metavar="URL", help="http(s) URL, no credentials")],
    *,
    events: Annotated[
        str,
        typer.Option(
            metavar="E,E,...",
            help="rollout.* or some of rollout.started, rollout.advanced, rollout.held, "
            "rollout.aborted, rollout.completed",
        ),
    ] = "rollout.*",
    description: Annotated[str | None, typer.Option(metavar="TEXT", help="Recorded")] = None,
    as_json: AsJson = False,
) -> None:
    """Register an endpoint; prints its signing secret, once. The registry checks the URL and
    the events (400 naming the field at fault)."""
    wanted = [e.strip() for e in events.split(",") if e.strip()]
    with reported(as_json), registry_client() as client:
        answer = client.add_webhook(url, wanted, description)
    emit(answer, as_json, _with_secret)


@webhook_app.command("list")
def webhook_list(
    *,
    removed: Annotated[bool, typer.Option(help="Removed endpoints too")] = False,
    as_json: AsJson = False,
) -> None:
    """Every endpoint: id, state (enabled, failing, disabled), URL, events."""
    with reported(as_json), registry_client() as client:
        answer = client.list_webhooks(removed=removed)
    emit(answer, as_json, lambda es: "\n".join(_endpoint_line(e) for e in es) or "no webhooks")


@webhook_app.command("remove")
def webhook_remove(endpoint: EndpointArg) -> None:
    """Remove an endpoint: its secret erased, waiting deliveries cancelled, its log kept."""
    with reported(), registry_client() as client:
        client.remove_webhook(endpoint)
    typer.echo(f"removed webhook {endpoint}")


@webhook_app.command("disable")
def webhook_disable(endpoint: EndpointArg, *, as_json: AsJson = False) -> None:
    """Stop sending to an endpoint (no new events are queued for it)."""
    with reported(as_json), registry_client() as client:
        answer = client.set_webhook_enabled(endpoint, enabled=False)
    emit(answer, as_json, _endpoint_line)


@webhook_app.command("enable")
def webhook_enable(endpoint: EndpointArg, *, as_json: AsJson = False) -> None:
    """Send to an endpoint again (clears failing)."""
    with reported(as_json), registry_client() as client:
        answer = client.set_webhook_enabled(endpoint, enabled=True)
    emit(answer, as_json, _endpoint_line)


@webhook_app.command("rotate")
def webhook_rotate(endpoint: EndpointArg, *, as_json: AsJson = False) -> None:
    """A new signing secret for an endpoint, printed once; the old one stops verifying."""
    with reported(as_json), registry_client() as client:
        answer = client.rotate_webhook_secret(endpoint)
    emit(answer, as_json, _with_secret)


def _delivery_lines(d: Any) -> list[str]:
    lines = [
        f"delivery {d['id']}  {d['event_type']}  {d['message_id']}  {d['state']}"
        + (f"  next at {d['next_attempt_at']}" if d.get("next_attempt_at") else "")
    ]
    for a in d.get("attempts", []):
        outcome = f"HTTP {a['status']}" if a.get("status") is not None else "no answer"
        error = f"  {a['error']}" if a.get("error") and a.get("status") is None else ""
        lines.append(f"  {a['at']}  {outcome}  {a['duration_ms']} ms{error}")
    return lines


@webhook_app.command("deliveries")
def webhook_deliveries(
    endpoint: EndpointArg,
    *,
    limit: Annotated[int, typer.Option(metavar="N", min=1, max=500, help="Newest N")] = 50,
    as_json: AsJson = False,
) -> None:
    """The delivery log, newest first: every attempt's time, HTTP status or error, duration."""
    with reported(as_json), registry_client() as client:
        answer = client.webhook_deliveries(endpoint, limit=limit)
    emit(
        answer,
        as_json,
        lambda a: (
            "\n".join(line for d in a["deliveries"] for line in _delivery_lines(d))
            or "no deliveries"
        ),
    )


@webhook_app.command("redeliver")
def webhook_redeliver(
    endpoint: EndpointArg,
    delivery: Annotated[int, typer.Argument(metavar="DELIVERY", help="Its id", min=1)],
    *,
    as_json: AsJson = False,
) -> None:
    """Queue a finished delivery again, now (the same webhook-id)."""
    with reported(as_json), registry_client() as client:
        answer = client.redeliver_webhook(endpoint, delivery)
    emit(answer, as_json, lambda d: "\n".join(_delivery_lines(d)))


@webhook_app.command("test")
def webhook_test(endpoint: EndpointArg, *, as_json: AsJson = False) -> None:
    """Queue a signed webhook.test event for an endpoint (see it in `webhook deliveries`)."""
    with reported(as_json), registry_client() as client:
        answer = client.test_webhook(endpoint)
    emit(answer, as_json, lambda d: "\n".join(_delivery_lines(d)))
