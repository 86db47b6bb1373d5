"""The simulated region's HTTP face: OpenAI chat completions and Responses, Anthropic messages (streaming and
not), and /v1/models, on aiohttp.web (a test and demo upstream, not the gateway's hot path).

Ground truth travels with every answer: `Server-Timing: queue, cold, prefill` (sent when the first
token is ready) and, on streams, `: sim-timing decode;dur=…` before the end. With a distance
configured, the request waits one propagation delay before it reaches the engine and every byte of
the answer leaves one delay after the engine produced it, on absolute deadlines.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import orjson
import pydantic
from aiohttp import web

from firsttoken.sim import lengths, text, tools, vectors
from firsttoken.sim.delivery import Delivery
from firsttoken.sim.engine import Sequence
from firsttoken.sim.lateness import Lateness
from firsttoken.sim.region import Overloaded, RateLimited, Region
from firsttoken.sim.replica import Replica
from firsttoken.sim.wire import Ask, BadRequest, PromptCache, Renderer, WireFormat
from firsttoken.sim.wire_anthropic import AnthropicMessages
from firsttoken.sim.wire_openai import OpenAIChat, embeddings_body, parse_embeddings
from firsttoken.sim.wire_responses import Responses

ANONYMOUS = "anonymous"
MAX_BODY_BYTES = 16 * 1024 * 1024  # as the gateway's own default limit


async def _until(when: float) -> None:
    """Sleep to an absolute loop time (no-op when it has passed), so delays never accumulate."""
    delay = when - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)


def _api_key(request: web.Request) -> str:
    """The caller's key, which rate limits are counted against (the region checks no keys)."""
    bearer = request.headers.get("Authorization", "")
    if bearer[:7].lower() == "bearer " and bearer[7:].strip():
        return bearer[7:].strip()
    return request.headers.get("x-api-key") or ANONYMOUS


def _server_timing(sequence: Sequence, first: float, one_way_s: float, replica: Replica | None = None) -> str:
    admitted = sequence.admitted_at if sequence.admitted_at is not None else sequence.arrived_at
    queue_ms = max((admitted - sequence.arrived_at - sequence.cold_s) * 1000, 0.0)
    timing = (f"queue;dur={queue_ms:.2f}, cold;dur={sequence.cold_s * 1000:.2f}, "
              f"prefill;dur={(first - admitted) * 1000:.2f}")
    if sequence.cached and replica is not None:  # what the prefix cache saved: that prefill, on this roofline
        timing += f", cache-read;dur={replica.engine.deployment.prefill_s(sequence.cached) * 1000:.2f}"
    return timing + (f", distance;dur={one_way_s * 2000:.2f}" if one_way_s else "")


def _prompt_cache(ask: Ask, sequence: Sequence) -> PromptCache:
    """The usage's account of the prefix cache: what was read, and, of a prefix asked to be cached, what
    was written."""
    if not ask.cache_prefix:
        return PromptCache(sequence.cached)
    read = min(sequence.cached, ask.cache_prefix)
    return PromptCache(read, ask.cache_prefix - read)


class SimServer:
    def __init__(self, region: Region) -> None:
        self.region = region
        self.lateness = Lateness()  # of every streamed event against its scheduled time
        # what became of each request: answered, refused (limits, overload), failed (faults), abandoned
        # (the client left before the engine finished it), so that a benchmark can count what reached us
        self.requests: Counter[str] = Counter()
        self.app = web.Application(client_max_size=MAX_BODY_BYTES)
        self.openai, self.anthropic, self.responses = OpenAIChat(), AnthropicMessages(), Responses()
        for prefix in ("/v1", ""):
            self.app.router.add_post(f"{prefix}/chat/completions", self.chat_completions)
            self.app.router.add_post(f"{prefix}/messages", self.messages)
            self.app.router.add_post(f"{prefix}/messages/count_tokens", self.count_tokens)
            self.app.router.add_post(f"{prefix}/embeddings", self.embeddings)
            self.app.router.add_post(f"{prefix}/responses", self.create_response)
            self.app.router.add_get(f"{prefix}/models", self.models)
            self.app.router.add_get(f"{prefix}/models/{{model}}", self.model)
        self.app.router.add_get("/sim/stats", self.stats)
        self.app.router.add_delete("/sim/stats", self.reset_stats)
        self.app.router.add_get("/sim/faults", self.get_faults)
        self.app.router.add_post("/sim/faults", self.change_faults)
        self.app.on_startup.append(self._start)
        self.app.on_cleanup.append(self._stop)

    async def _start(self, _app: web.Application) -> None:
        self.region.start()

    async def _stop(self, _app: web.Application) -> None:
        await self.region.close()

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, self.openai)

    async def messages(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, self.anthropic)

    async def count_tokens(self, request: web.Request) -> web.Response:
        """Anthropic's token count of a Messages request, without running it: its input tokens as the region
        counts them (max_tokens is not needed here, as on Anthropic's API)."""
        try:
            body = orjson.loads(await request.read())
            if isinstance(body, dict):
                body = {"max_tokens": 1, **body}
            ask = self.anthropic.parse(body, self.region.models)
        except orjson.JSONDecodeError:
            return self._error(self.anthropic, 400, "The request body is not valid JSON.", code="invalid_json")
        except BadRequest as exc:
            return self._error(self.anthropic, exc.status, str(exc), exc.param, exc.code)
        return web.json_response({"input_tokens": ask.prompt_tokens})

    async def create_response(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, self.responses)

    async def embeddings(self, request: web.Request) -> web.Response:
        """Vectors from an encoder: its forward pass over the inputs is a prefill on the engine, timed as one."""
        loop = asyncio.get_running_loop()
        try:
            ask = parse_embeddings(orjson.loads(await request.read()), self.region.encoders)
            self.region.check_fits(ask.model, ask.tokens, 1)
        except orjson.JSONDecodeError:
            return self._error(self.openai, 400, "The request body is not valid JSON.", code="invalid_json")
        except BadRequest as exc:
            return self._error(self.openai, exc.status, str(exc), exc.param, exc.code)
        except ValueError as exc:
            return self._error(self.openai, 400, str(exc), "input", "context_length_exceeded")
        seed = self.region.settings.seed
        body = embeddings_body(ask, [vectors.shortened(vectors.embed(t, ask.width, seed), ask.dims)
                                     for t in ask.texts])
        await _until(loop.time() + self.region.one_way_s)
        arrived = loop.time()
        self.requests["received"] += 1
        sequence = Sequence(ask.tokens, 1, arrived)
        delivery = Delivery(1, self.region.one_way_s, self.lateness, None)
        try:
            replica = self.region.admit(ask.model, sequence, _api_key(request), arrived, delivery)
        except (ValueError, Overloaded, RateLimited) as exc:
            self.requests["refused"] += 1
            await _until(arrived + self.region.one_way_s)
            return self._refusal(self.openai, exc)
        try:
            done = await delivery.first
            await _until(done + self.region.one_way_s)
            return web.Response(body=body, content_type="application/json",
                                headers={"Server-Timing": _server_timing(sequence, done, self.region.one_way_s)})
        finally:
            self.requests["answered" if sequence.finished_at is not None else "abandoned"] += 1
            replica.cancel(sequence)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._model(name) for name in self.region.models]})

    async def model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name not in self.region.models:
            return self._error(self.openai, 404, f"The model {name!r} does not exist in this region; it serves "
                                                 f"{', '.join(self.region.models)}.", "model", "model_not_found")
        return web.json_response(self._model(name))

    def _model(self, name: str) -> dict[str, object]:
        return {"id": name, "object": "model", "created": 0, "owned_by": "firsttoken-sim",
                "description": f"simulated: {self.region.settings.describe()}"}

    async def stats(self, request: web.Request) -> web.Response:
        """The region's own account: events written and how late, and the engines' state."""
        replicas = {name: [{"loaded": r.loaded, "loads": r.loads, "running": len(r.engine.running),
                            "waiting": len(r.engine.waiting), "kv_used": r.engine.kv_used,
                            "step_lateness": r.lateness.summary()} for r in replicas]
                    for name, replicas in self.region.replicas.items()}
        return web.json_response({"events": self.lateness.summary(), "requests": dict(self.requests),
                                  "replicas": replicas})

    async def reset_stats(self, request: web.Request) -> web.Response:
        self.lateness.reset()
        self.requests.clear()
        for replicas in self.region.replicas.values():
            for replica in replicas:
                replica.lateness.reset()
        return web.json_response({"reset": True})

    async def get_faults(self, request: web.Request) -> web.Response:
        return web.json_response(self.region.faults.settings.model_dump())

    async def change_faults(self, request: web.Request) -> web.Response:
        """Change some faults while the region runs: a JSON object of the fields to change."""
        try:
            changes = orjson.loads(await request.read())
            if not isinstance(changes, dict):
                raise ValueError("send a JSON object of the fault settings to change")
            settings = self.region.faults.change(changes)
        except (orjson.JSONDecodeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()) \
                if isinstance(exc, pydantic.ValidationError) else str(exc)
            return self._error(self.openai, 400, message, code="invalid_faults")
        return web.json_response(settings.model_dump())

    def _answers(self, ask: Ask, wire: WireFormat) -> list[text.Answer]:
        """The request's `n` answers (choice 0 is what the same request with n = 1 gets), each thought
        about first when the model reasons and the request asks it to (or does not say, where the format
        reasons by default). Tool calls come without thinking."""
        effort = self._effort(ask, wire)
        answers = []
        for choice in range(ask.n):
            content = ask.content if choice == 0 else {"request": ask.content, "choice": choice}
            answer = self._answer(ask, wire, content)
            if effort is not None and not answer.calls:
                drawn = lengths.reasoning_length(effort, lengths.fraction_for(self.region.settings.seed,
                                                                              {"thinking": content}))
                answer = text.thought(min(drawn, ask.thinking_budget or drawn), ask.max_tokens, answer)
            answers.append(answer)
        return answers

    def _effort(self, ask: Ask, wire: WireFormat) -> str | None:
        """How hard the model thinks before answering; None: it does not."""
        reasons = self.region.settings.deployments[ask.model].model.reasoning
        asked = ask.thinking_budget is not None or ask.reasoning_effort is not None
        if asked and not reasons:
            field = "thinking" if ask.thinking_budget is not None else "reasoning_effort"
            raise BadRequest(400, f"'{field}' is not supported with {ask.model}: it is not a reasoning model.", field)
        if ask.thinking_budget is not None:
            return "medium"
        if ask.reasoning_effort is not None:
            return None if ask.reasoning_effort == "none" else ask.reasoning_effort
        return "medium" if wire.reasons_by_default and reasons else None

    def _answer(self, ask: Ask, wire: WireFormat, content: Any) -> text.Answer:
        """Tool calls when the request's tools are to be called this turn; otherwise words. `content` is
        what the draws are keyed by."""
        seed = self.region.settings.seed
        if ask.tools is not None:
            calls = tools.calls_for(ask.tools, ask.message, seed, content, wire.call_prefix)
            if calls:
                return text.tool_answer(calls, ask.max_tokens)
        if ask.schema is not None:
            return text.json_answer(tools.value_for(ask.schema, "response_format", seed, content, "response_format"),
                                    ask.max_tokens)
        return text.answer(ask.max_tokens, ask.stop, self._natural_length(ask, content))

    def _natural_length(self, ask: Ask, content: Any) -> int | None:
        """Where the answer ends on its own; None when it runs to max_tokens."""
        settings = self.region.settings
        if ask.ignore_eos or settings.answers == "max_tokens":
            return None
        return lengths.natural_length(ask.kind, lengths.fraction_for(settings.seed, content))

    def _error(self, wire: WireFormat, status: int, message: str, param: str | None = None,
               code: str | None = None, headers: dict[str, str] | None = None,
               kind: str | None = None) -> web.Response:
        return web.Response(status=status, body=wire.error_body(status, message, param, code, kind),
                            content_type="application/json", headers=headers)

    async def _generate(self, request: web.Request, wire: WireFormat) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        one_way = self.region.one_way_s
        try:
            body = orjson.loads(await request.read())
            ask = wire.parse(body, self.region.models)
        except orjson.JSONDecodeError:
            return self._error(wire, 400, "The request body is not valid JSON.", code="invalid_json")
        except BadRequest as exc:
            return self._error(wire, exc.status, str(exc), exc.param, exc.code)
        if ask.model in self.region.encoders:
            return self._error(wire, 400, f"{ask.model} is an embedding model: ask /v1/embeddings.", "model")
        try:  # before the answer is built: an absurd max_tokens must cost nothing
            self.region.check_fits(ask.model, ask.prompt_tokens, ask.max_tokens)
        except ValueError as exc:
            return self._error(wire, 400, str(exc), "max_tokens", "context_length_exceeded")
        try:
            answers = self._answers(ask, wire)
        except tools.ToolError as exc:
            return self._error(wire, 400, str(exc), exc.param)
        except BadRequest as exc:
            return self._error(wire, exc.status, str(exc), exc.param, exc.code)
        # n choices decode together after one prefill of their shared prompt: as many steps as the longest
        steps = max(answer.steps for answer in answers)
        await _until(loop.time() + one_way)  # the request crossing to the region
        arrived = loop.time()
        self.requests["received"] += 1
        fault = self.region.faults.draw()
        if fault.error is not None:
            self.requests["failed"] += 1
            return await self._fail(request, wire, fault.error, arrived + one_way)
        sequence = Sequence(ask.prompt_tokens, max(steps, 1), arrived)
        key = _api_key(request)
        renderer = wire.renderer(ask, answers)
        thinking = len(answers[0].reasoning)
        delivery = Delivery(steps, one_way, self.lateness, renderer if ask.stream else None, mark=thinking)
        if fault.delay_s:  # a stall or a busy region: it counts as queue in the ground truth
            try:
                await _until(arrived + fault.delay_s)
            except asyncio.CancelledError:  # the client gave up on it (or hedged it elsewhere)
                self.requests["abandoned"] += 1
                raise
        admitted = loop.time()
        try:
            replica = self.region.admit(ask.model, sequence, key, admitted, delivery,
                                        requested=ask.prompt_tokens + ask.max_tokens * ask.n,
                                        blocks=ask.prompt_blocks)
        except (ValueError, Overloaded, RateLimited) as exc:
            self.requests["refused"] += 1
            await _until(arrived + one_way)  # and the refusal crossing back
            return self._refusal(wire, exc)
        renderer.prompt_cache = _prompt_cache(ask, sequence)
        headers = self.region.limits.headers(key, admitted) if isinstance(wire, OpenAIChat) else {}
        try:
            first = await delivery.first
            headers["Server-Timing"] = _server_timing(sequence, first, one_way, replica)
            if not ask.stream:
                last = await delivery.done
                if thinking and delivery.marked_at is not None:  # the thinking before the answer's first token
                    headers["Server-Timing"] += f", reasoning;dur={(delivery.marked_at - first) * 1000:.2f}"
                await _until(last + one_way)
                return web.Response(body=renderer.whole(), content_type="application/json", headers=headers)
            return await self._stream(request, delivery, renderer, first, headers, one_way)
        finally:
            self.requests["answered" if sequence.finished_at is not None else "abandoned"] += 1
            replica.cancel(sequence)  # a no-op once finished; frees the KV of an abandoned request

    async def _fail(self, request: web.Request, wire: WireFormat, error: str, answer_at: float) -> web.Response:
        """A request the faults fail: the connection dropped on arrival, or a server error sent back."""
        if error == "reset":
            if request.transport is not None:
                request.transport.abort()
            return web.Response()  # never sent: the connection is gone
        await _until(answer_at)
        status = int(error)
        return self._error(wire, status, f"Simulated fault: this region failed the request with {status}.",
                           code="simulated_fault", kind="server_error")

    def _refusal(self, wire: WireFormat, exc: Exception) -> web.Response:
        if isinstance(exc, RateLimited):
            refusal = exc.refusal
            headers = {} if refusal.retry_after_s == float("inf") else {"Retry-After": refusal.retry_after}
            return self._error(wire, 429, str(exc), code="rate_limit_exceeded", headers=headers, kind=refusal.limit)
        if isinstance(exc, Overloaded):
            status = getattr(wire, "overload_status", exc.status)  # Anthropic's format has its own: 529
            return self._error(wire, status, str(exc), code="overloaded", headers={"Retry-After": "1"})
        return self._error(wire, 400, str(exc), "messages", "context_length_exceeded")

    async def _stream(self, request: web.Request, delivery: Delivery, renderer: Renderer, first: float,
                      headers: dict[str, str], one_way: float) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                               **headers})
        if request.version < (1, 1):
            return self._error(self.openai, 505, "Streaming needs HTTP/1.1 (chunked transfer encoding).")
        response.enable_chunked_encoding()
        await _until(first + one_way)
        try:
            await response.prepare(request)
            await response.write(renderer.opening())
        except ConnectionResetError:  # the client left while its first token was on its way
            return response
        self.lateness.record(asyncio.get_running_loop().time() - first - one_way)
        if request.transport is None:  # gone already
            return response
        delivery.attach(request.transport)  # the rest are written as the engine releases them
        last = await delivery.done
        try:
            await response.write(renderer.closing((last - first) * 1000))
            await response.write_eof()
        except ConnectionResetError:
            pass
        return response
