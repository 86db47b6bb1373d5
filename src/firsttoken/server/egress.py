"""The way out to the upstreams, built once per process: their links and warm pools, the alarms that
bound every wait, and the router that learns from every attempt.

An attempt sends the request to one target and waits, within the target's first-byte deadline (or the
client's, when sooner), for the response headers; a body is read within the idle and total timeouts.
What failed comes back as the GatewayError the client would hear, its message naming the upstream and
the timeout or fault, never a credential.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter

import aiohttp

from firsttoken.alarms import Alarms
from firsttoken.errors import GatewayError, bad_gateway, gateway_timeout
from firsttoken.journey.tcp_info import RttReader
from firsttoken.journey.timeline import Timeline
from firsttoken.routing.router import Router
from firsttoken.routing.targets import Target
from firsttoken.server.deadline import CLIENT_DEADLINE, passed_if_clients
from firsttoken.server.http import Headers
from firsttoken.upstream.adapter import UpstreamRequest
from firsttoken.upstream.connector import protocol_of, take_queued_ms
from firsttoken.upstream.registry import UpstreamLink, Upstreams

# Failures to get or read a response (the connection, or a response that is not HTTP): the next target
# may well succeed. aiohttp.ClientError covers its connection, payload and malformed-response errors.
CONNECTION_ERRORS = (aiohttp.ClientError, ConnectionError, OSError)
_PASSED_HEADERS = (b"retry-after", b"x-ratelimit-")

BuildRequest = Callable[[UpstreamLink, Target], UpstreamRequest]

UPSTREAM_RTT = RttReader()  # the upstream connections of this process


@dataclass(slots=True)
class Attempt:
    """One target tried: its link, and the response headers or why there are none."""
    link: UpstreamLink
    sent: float  # on the alarms' clock
    deadline: float  # for the response headers
    response: aiohttp.ClientResponse | None = None
    failure: GatewayError | None = None
    native: bool = False  # the request went in the client's own format (UpstreamRequest.native)


class Egress:
    __slots__ = ("upstreams", "alarms", "router")

    def __init__(self, upstreams: Upstreams, alarms: Alarms, router: Router) -> None:
        self.upstreams = upstreams
        self.alarms = alarms
        self.router = router

    async def attempt(self, target: Target, build: BuildRequest, timeline: Timeline) -> Attempt:
        """Send the request to one target and wait, within its first-byte deadline, for the headers."""
        link = self.upstreams[target.upstream]
        request = build(link, target)
        timeline.route = target.label
        timeline.upstream = link.name
        timeline.floor_ms = link.floor_ms
        timeline.attempts += 1
        timeline.sent = perf_counter()
        alarms = self.alarms
        now = alarms.now()
        attempt = Attempt(link, now, now + link.settings.timeouts.first_byte, native=request.native)
        client = CLIENT_DEADLINE.get()
        if client is not None and client.at < attempt.deadline:
            if client.at <= now:
                attempt.failure = client.passed()
                return attempt
            attempt.deadline = client.at
        try:
            with alarms.deadline(attempt.deadline):
                attempt.response = await _open(link, request, timeline)
        except aiohttp.ServerTimeoutError as exc:  # a TimeoutError too, but the connect's own
            attempt.failure = connection_error(link, exc)
        except TimeoutError:
            attempt.failure = passed_if_clients(attempt.deadline) or timed_out(link)
        except CONNECTION_ERRORS as exc:
            attempt.failure = connection_error(link, exc)
        return attempt

    async def read_body(self, link: UpstreamLink, response: aiohttp.ClientResponse, sent: float) -> bytes:
        """A whole body, read as it comes: each chunk within the upstream's idle timeout of the last, the whole
        within its total timeout of `sent` and within the client's deadline; a GatewayError (a 504 naming
        which ran out) when one passes."""
        alarms, timeouts = self.alarms, link.settings.timeouts
        client = CLIENT_DEADLINE.get()
        end, last = sent + timeouts.total, "total"
        if client is not None and client.at < end:
            end, last = client.at, "client"
        parts: list[bytes] = []
        idle = alarms.now() + timeouts.idle
        limit = alarms.deadline(min(idle, end))
        try:
            with limit:
                while chunk := await response.content.readany():
                    parts.append(chunk)
                    idle = alarms.now() + timeouts.idle
                    limit.reschedule(min(idle, end))
        except TimeoutError:
            which = "idle" if idle < end else last
            if which == "client":
                assert client is not None
                raise client.passed() from None
            raise timed_out(link, which) from None
        return b"".join(parts)


async def _open(link: UpstreamLink, request: UpstreamRequest, timeline: Timeline) -> aiohttp.ClientResponse:
    """Send the request and wait for the response headers; once more if a pooled connection was closed
    under us (the upstream's keep-alive timer and our reuse can cross: it never saw the request). A new
    connection that drops is a failure like any other: the upstream may have seen the request and
    started on it, so sending it again is the router's call, within its retry budget."""
    session, connector = link.pool.session, link.pool.connector
    assert session is not None and connector is not None
    opened = connector.connections_opened
    take_queued_ms()  # an earlier attempt's wait (one that failed) is not this one's
    try:
        # No redirects: aiohttp would carry api-key / x-api-key headers to wherever they point.
        response = await session.post(request.url, data=request.data, headers=request.headers,
                                      allow_redirects=False)
    except aiohttp.ServerDisconnectedError:
        # Any connection opened meanwhile (by this request or, rarely, another) counts as ours: when in
        # doubt, do not send again.
        if connector.connections_opened != opened:
            raise
        response = await session.post(request.url, data=request.data, headers=request.headers,
                                      allow_redirects=False)
    timeline.first_byte = perf_counter()
    timeline.pool_ms = take_queued_ms()
    timeline.opened(connector.handshake(response))
    timeline.upstream_rtt = UPSTREAM_RTT.rtt(getattr(protocol_of(response), "transport", None),
                                             timeline.first_byte, fresh=not timeline.reused)
    timeline.upstream_said(response.headers.get("Server-Timing"))
    return response


def passthrough_headers(link: UpstreamLink, response: aiohttp.ClientResponse) -> Headers:
    """Rate-limit headers clients act on (Retry-After, x-ratelimit-*) pass through to them (without any
    credential the upstream might have put in one)."""
    out: Headers = []
    for name, value in response.raw_headers:
        lower = name.lower()
        if lower.startswith(_PASSED_HEADERS):
            out.append((lower, link.adapter.scrub(value)))
    return out


def refusal(link: UpstreamLink, response: aiohttp.ClientResponse, data: bytes) -> GatewayError:
    """An upstream's error status (or a redirect) as the client's error, its rate-limit headers kept."""
    if response.status < 400:
        return bad_gateway(f"upstream {link.name} answered with a redirect (HTTP {response.status}); set its url "
                           f"to the address it redirects to.", code="upstream_redirect")
    error = link.adapter.error(response.status, data)
    error.headers.update({k.decode("latin-1"): v.decode("latin-1") for k, v in passthrough_headers(link, response)})
    return error


def connection_error(link: UpstreamLink, exc: BaseException) -> GatewayError:
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return gateway_timeout(f"upstream {link.name} did not answer within {link.settings.timeouts.connect:g} s "
                               f"of connecting; check that it is up, or raise its timeouts.")
    if isinstance(exc, aiohttp.ClientResponseError):
        detail = exc.message.splitlines()[0] if exc.message else exc.status
        return bad_gateway(link.adapter.redactor.text(f"upstream {link.name} ({link.settings.public_url}) sent a "
                                                      f"response that is not valid HTTP: {detail}"),
                           code="upstream_bad_response")
    return bad_gateway(link.adapter.redactor.text(f"upstream {link.name} ({link.settings.public_url}) is unreachable: "
                                                  f"{type(exc).__name__}{': ' + str(exc) if str(exc) else ''}"))


def timed_out(link: UpstreamLink, which: str = "first_byte") -> GatewayError:
    """A 504 naming the timeout that ran out: `first_byte` (no answer), `idle` (a body that stalled) or
    `total` (a whole answer that took too long, however steadily it came)."""
    seconds = getattr(link.settings.timeouts, which)
    if which == "total":
        return gateway_timeout(f"upstream {link.name}'s answer did not finish within {seconds:g} s (timeouts.total); "
                               f"stream long answers, or raise the timeout.")
    return gateway_timeout(f"upstream {link.name} sent nothing for {seconds:g} s (timeouts.{which}); it may be "
                           f"overloaded, or the timeout may be too short.")
