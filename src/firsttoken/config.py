"""Settings: YAML file + environment → typed, validated settings.

Every error names the key that is wrong and says what to write instead, because a gateway that
starts with a silently ignored typo is worse than one that refuses to start.
"""

from __future__ import annotations

import base64
import importlib.util
import ipaddress
import os
import re
from functools import cached_property
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from firsttoken.geo.places import GeoError, Place, resolve
from firsttoken.journey.otlp import INSTALL_HINT as OTLP_INSTALL_HINT
from firsttoken.sim.settings import SimSettings

SIM_UPSTREAM = "sim"  # the upstream name of the in-process simulated region


def _known_place(value: str | None) -> str | None:
    """A city, region code or lat,lon that geo knows; else the error names the closest ones."""
    if value is not None:
        try:
            resolve(value)
        except GeoError as exc:
            raise ValueError(str(exc)) from None
    return value


class ConfigError(Exception):
    """A configuration problem, worded for the person who has to fix it."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Listen(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(8787, ge=1, le=65535)
    # Without client keys the gateway is an open relay for the upstream keys it holds, so binding
    # beyond loopback needs this said out loud.
    allow_unauthenticated: bool = False
    access_log: bool = Field(False, description="a line per request on stderr: id, method, path, status, route, "
                                                "cache, ttft, e2e")
    tls_cert: str | None = Field(None, description="serve HTTPS with this certificate chain (PEM)")
    tls_key: str | None = Field(None, description="its private key (PEM; default: in the tls_cert file)")

    @model_validator(mode="after")
    def _tls_files(self) -> Listen:
        if self.tls_key is not None and self.tls_cert is None:
            raise ValueError("tls_key without tls_cert: give the certificate too")
        for name in ("tls_cert", "tls_key"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(f"{name}: no file at {path}")
        return self

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert is not None else "http"


class Timeouts(_Strict):
    connect: float = Field(10.0, gt=0, description="seconds for DNS + TCP + TLS of a new connection")
    first_byte: float = Field(600.0, gt=0, description="seconds from request sent to first response byte")
    idle: float = Field(300.0, gt=0, description="seconds allowed between two chunks of a response")
    total: float = Field(1800.0, gt=0, description="seconds from request sent to the last byte of a whole "
                                                   "(not streamed) answer; a stream is bounded by idle instead")


class Pool(_Strict):
    warm: int = Field(2, ge=0, le=256, description="connections opened at start-up and kept warm")
    # Streams hold their connection for as long as they generate: a limit is a queue for every request past
    # it, so it is set by what one worker holds well (docs/benchmarks.md, many long streams), not by the
    # short requests that return a connection within milliseconds.
    max: int = Field(4096, ge=1, description="most connections open to this upstream at once; requests past it "
                                             "wait (the journey's `pool` phase)")
    refresh_s: float = Field(20.0, gt=0, description="idle seconds after which warm connections are exercised")
    keepalive_s: float = Field(60.0, gt=0, description="how long an idle connection is kept by us")


class KeepWarm(_Strict):
    idle_s: float | None = Field(None, gt=0, description="idle seconds after which a ping goes; learned if unset")
    max_per_hour: int = Field(60, ge=1, description="pings per target per hour, at most")


class Upstream(_Strict):
    url: str
    api: Literal["openai", "anthropic", "azure"] = "openai"
    key: SecretStr | None = None
    region: str | None = None
    api_version: str | None = None  # azure: api-version query parameter; anthropic: anthropic-version header
    headers: dict[str, str] = Field(default_factory=dict)
    models: list[str] = Field(default_factory=list, description="models it serves, if it cannot list them")
    stream_usage: bool = True  # ask for stream_options.include_usage (a few servers reject it)
    responses: bool = Field(False, description="it serves OpenAI's Responses API at {url}/responses (OpenAI, "
                                               "vLLM): Responses requests pass through to it untranslated")
    ca_file: str | None = None  # a CA bundle to trust for this upstream's TLS (a private or corporate CA)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    pool: Pool = Field(default_factory=Pool)
    keep_warm: KeepWarm | None = Field(None, description="a scale-to-zero upstream: ping its models when idle")

    _region = field_validator("region")(lambda cls, value: _known_place(value))

    @property
    def place(self) -> Place | None:
        """Where its GPUs are, when `region` says."""
        return None if self.region is None else resolve(self.region)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"must be an http:// or https:// URL, got {value!r}")
        return value.rstrip("/")

    @property
    def public_url(self) -> str:
        """The URL without credentials or query, fit for logs and error messages."""
        return re.sub(r"^(https?://)[^/@]*@", r"\1", self.url).split("?", 1)[0]

    def secrets(self) -> list[str]:
        """The credentials sent to this upstream: its key, auth-like headers, any in its URL."""
        found = [self.key.get_secret_value()] if self.key is not None else []
        for name, value in self.headers.items():
            if _CREDENTIAL_HEADER.search(name):  # the value, and its token without a scheme ("Bearer …")
                found += [value, *(part for part in value.split() if part.lower() not in _AUTH_SCHEMES)]
        return found + _url_secrets(self.url)


class KeyBudget(_Strict):
    """What a key may spend, in USD, per UTC day and per UTC month (docs/contracts.md, "Spend")."""

    usd_per_day: float | None = Field(None, gt=0)
    usd_per_month: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _some_limit(self) -> KeyBudget:
        if self.usd_per_day is None and self.usd_per_month is None:
            raise ValueError("give usd_per_day, usd_per_month or both")
        return self


class ClientKey(_Strict):
    name: str = Field(min_length=1)
    key: SecretStr
    rpm: int | None = Field(None, ge=1, description="requests per minute this key may send")
    tpm: int | None = Field(None, ge=1, description="tokens per minute (estimated, then corrected from usage)")
    budget: KeyBudget | None = Field(None, description="USD this key may spend per day and per month")

    @field_validator("key")
    @classmethod
    def _key(cls, value: SecretStr) -> SecretStr:
        if len(value.get_secret_value()) < 8:
            raise ValueError("must be at least 8 characters")
        return value


class Cache(_Strict):
    """The edge cache. On in every gateway unless the config says `cache: false` (or `backend: none`)."""

    backend: Literal["sqlite", "redis", "memory", "none"] = "sqlite"
    path: str = "firsttoken-cache.db"
    url: str | None = None
    semantic: bool = Field(True, description="also answer paraphrases (a local embedding model, on ONNX Runtime)")
    similarity: float = Field(0.85, gt=0, le=1, description="the least cosine similarity of a semantic hit")
    embedding: str = Field("all-MiniLM-L6-v2", description="the local embedding model: all-MiniLM-L6-v2, "
                           "wordllama-l2-supercat (static: microseconds), a directory with model.onnx and "
                           "tokenizer.json, or python:module:factory")
    semantic_wait_ms: float = Field(0, ge=0, description="the semantic lookup's head start: how long a request "
                                    "waits for it before leaving (0: it leaves at once); still running, the "
                                    "lookup races the upstream")
    race_budget: float = Field(0.1, ge=0, le=1, description="upstream requests that a semantic hit found after "
                               "they left may cancel, per lookup, on average (a hit beyond it is not served)")
    max_prompts: int = Field(100_000, ge=1, description="prompts the semantic index keeps; the oldest go first")
    ttl: int = Field(86400, ge=0, description="seconds an answer is kept")
    max_bytes: int = Field(256 * 1024 * 1024, ge=1024, description="answers kept in all; the oldest go first")
    shared: bool = Field(False, description="one cache for every client key (by default each has its own)")
    models: dict[str, int] = Field(default_factory=dict, description="TTL per alias or upstream/model; 0: off")

    prefix: str = Field("firsttoken:cache:", min_length=1, description="redis: the prefix of every key")

    @model_validator(mode="after")
    def _redis_url(self) -> Cache:
        if self.backend == "redis" and not (self.url or "").startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("the redis backend needs url: redis://host:6379/0 (or rediss://, unix://)")
        return self

    @property
    def enabled(self) -> bool:
        return self.backend != "none"

    @field_validator("models")
    @classmethod
    def _ttls(cls, value: dict[str, int]) -> dict[str, int]:
        for model, ttl in value.items():
            if ttl < 0:
                raise ValueError(f"{model}: a TTL is seconds, 0 or more (0 turns the cache off for it)")
        return value


class Breaker(_Strict):
    failures: int = Field(5, ge=1, description="failures in a row that open a target's circuit")
    open_s: float = Field(10.0, gt=0, description="seconds an open circuit waits before one probe")
    max_open_s: float = Field(120.0, gt=0, description="the longest wait, doubled after each failed probe")


class Hedge(_Strict):
    enabled: bool = Field(True, description="race a second target when the first token is late")
    budget: float = Field(0.05, ge=0, le=1, description="hedges per client request, on average")
    percentile: float = Field(90, gt=0, lt=100, description="the target's recent TTFT percentile to wait for")
    median_times: float = Field(3.0, gt=1, description="…but never more than this many times its median")
    min_median_times: float = Field(1.5, ge=1, description="…and never less: a first token a little late is "
                                                           "noise, and a hedge sent then would rarely win")
    min_s: float = Field(0.05, ge=0, description="never hedge sooner than this")
    max_s: float = Field(2.0, gt=0, description="never wait longer than this (also before any measurement)")
    min_samples: int = Field(20, ge=1, description="measured first tokens before the percentile is trusted")

    @model_validator(mode="after")
    def _bounds_in_order(self) -> Hedge:
        if self.min_median_times > self.median_times:
            raise ValueError(f"min_median_times ({self.min_median_times}) is above median_times ({self.median_times})")
        if self.min_s > self.max_s:
            raise ValueError(f"min_s ({self.min_s}) is above max_s ({self.max_s})")
        return self


class Routing(_Strict):
    strategy: Literal["fastest", "ordered"] = Field(
        "fastest", description="fastest: by expected time to first token; ordered: as the alias lists them")
    ordered: list[str] = Field(default_factory=list, description="aliases whose targets keep their written order")
    weights: dict[str, float] = Field(default_factory=dict, description="upstream/model → weight in the draw")
    load_bias: float = Field(0.5, ge=0, le=4, description="how much requests in flight count against a target: "
                             "its time above the floor × (1 + in flight) ** load_bias (0: not at all)")
    retry_budget: float = Field(0.2, ge=0, le=10, description="retries allowed per client request, on average")
    breaker: Breaker = Field(default_factory=Breaker)
    hedge: Hedge = Field(default_factory=Hedge)

    @field_validator("weights")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        for target, weight in value.items():
            if weight <= 0:
                raise ValueError(f"{target}: a weight is more than 0 (leave a target out of the alias instead)")
        return value


TaskKind = Literal["classification", "extraction", "short", "chat", "code", "reasoning", "long-form"]


class TaskSizing(_Strict):
    alias: str = Field("auto", min_length=1, description="the model name clients ask for to be sized")
    tiers: dict[str, list[str]] = Field(description="tier → targets (upstream/model or an alias), smallest first")
    kinds: dict[TaskKind, str] = Field(default_factory=dict,
                                       description="kind of task → tier; kinds not listed go to the default tier")
    default: str = Field(description="the tier for kinds not listed, and for requests that opt out")
    neighbours: bool = Field(True, description="when rules do not tell, ask the nearest labelled examples "
                                               "(local embeddings)")

    @model_validator(mode="after")
    def _tiers_known(self) -> TaskSizing:
        unknown = {self.default, *self.kinds.values()} - set(self.tiers)
        if unknown:
            raise ValueError(f"tiers {sorted(unknown)} are named but not defined under tiers: ({sorted(self.tiers)})")
        return self


class Limits(_Strict):
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    max_header_bytes: int = Field(32 * 1024, ge=4096, le=1024 * 1024,
                                  description="a request's line and headers together: 431 past it")
    # Bounds on a request's JSON, checked as it is parsed, before anything re-serialises it (a serialiser's
    # recursion limit is a 500 otherwise) or walks it.
    max_json_depth: int = Field(64, ge=8, le=250, description="nesting of arrays and objects in a request body")
    max_messages: int = Field(100_000, ge=1, description="messages (or input items) in one request")
    max_string_bytes: int = Field(8 * 1024 * 1024, ge=1024, description="the longest single string in a body")
    # Clients that send slowly hold a connection each: these bound how long and how many.
    header_timeout_s: float = Field(20.0, gt=0, description="seconds for a request's headers to arrive, "
                                                            "from its first byte (or the connection's opening)")
    body_timeout_s: float = Field(60.0, gt=0, description="seconds for a request's whole body to arrive")
    max_pending_connections: int = Field(1024, ge=1, description="connections waiting for a request's headers; "
                                                                 "past it the longest-waiting is closed")
    redis: str | None = Field(None, description="keys' rpm and tpm kept in Redis, shared by replicas: redis://…")
    redis_down: Literal["open", "closed"] = Field(
        "open", description="while that Redis cannot be reached: let limited keys' requests through, uncounted "
                            "(open), or refuse them with a 503 until it is back (closed)")

    _redis = field_validator("redis")(lambda cls, value: _redis_url(value))


class Price(_Strict):
    """A route's price: per million tokens (an API), or per GPU-hour (a self-hosted target)."""

    usd_per_million_input: float | None = Field(None, ge=0)
    usd_per_million_output: float | None = Field(None, ge=0)
    usd_per_million_cached_input: float | None = Field(None, ge=0, description="unset: the input's price")
    usd_per_million_cache_write: float | None = Field(None, ge=0, description="unset: the input's price")
    usd_per_million_cache_write_1h: float | None = Field(None, ge=0, description="cache writes kept an hour "
                                                         "(Anthropic's 1-hour TTL); unset: the cache write's price")
    usd_per_gpu_hour: float | None = Field(None, gt=0, description="a self-hosted target: what one GPU costs an hour")
    gpus: int = Field(1, ge=1, description="the GPUs one replica of the model holds")
    source: str = Field("the config", min_length=1, description="where the price comes from, for reports")

    @model_validator(mode="after")
    def _one_way(self) -> Price:
        per_token = self.usd_per_million_input is not None or self.usd_per_million_output is not None
        if per_token == (self.usd_per_gpu_hour is not None):
            raise ValueError("give usd_per_million_input and usd_per_million_output (an API), or "
                             "usd_per_gpu_hour (a self-hosted target)")
        if per_token and (self.usd_per_million_input is None or self.usd_per_million_output is None):
            raise ValueError("give both usd_per_million_input and usd_per_million_output")
        return self


class SpendSettings(_Strict):
    log: str | None = Field("firsttoken-spend.db", description="SQLite file of every request's cost and each "
                                                              "key's daily totals; null: kept in memory only")
    max_age_days: float = Field(400.0, gt=0, description="how long each request's row is kept (daily totals stay)")
    warn_at: float = Field(0.8, gt=0, le=1, description="the share of a budget past which answers warn")
    redis: str | None = Field(None, description="keys' budgets kept in Redis, shared by replicas: redis://…")
    prices: dict[str, Price] = Field(default_factory=dict, description="by upstream/model, or by model on any "
                                                                       "upstream: these win over the shipped table")

    _redis = field_validator("redis")(lambda cls, value: _redis_url(value))


class Streaming(_Strict):
    heartbeat_s: float = Field(5.0, gt=0, description="SSE comment interval while waiting for the first token")
    client_stall_s: float = Field(60.0, gt=0, description="a client that reads nothing for this long is dropped")


class CorsSettings(_Strict):
    origins: list[str] = Field(min_length=1, description="origins browser apps may call from "
                                                         "(https://app.example.com), or '*' for any")


class DashboardSettings(_Strict):
    enabled: bool = Field(True, description="serve /dashboard, the live view of every journey")


class Otlp(_Strict):
    endpoint: str = Field(description="the collector's OTLP/HTTP URL: http://host:4318 (/v1/traces is added)")
    headers: dict[str, SecretStr] = Field(default_factory=dict, description="sent with every export (API keys)")
    service_name: str = Field("firsttoken", min_length=1)

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        match = re.match(r"^(https?://[^/\s]+)(/\S*)?$", value)
        if not match:
            raise ValueError(f"must be an http:// or https:// URL of an OTLP/HTTP collector, got {value!r}")
        if importlib.util.find_spec("opentelemetry.sdk") is None:
            raise ValueError(OTLP_INSTALL_HINT)
        # Like OTEL_EXPORTER_OTLP_ENDPOINT: a bare collector address gets the signal's path.
        return value if match.group(2) not in (None, "/") else match.group(1) + "/v1/traces"


class Journeys(_Strict):
    log: str | None = Field("firsttoken-journeys.db", description="SQLite file of every journey; null: none")
    max_rows: int = Field(1_000_000, ge=1000)
    max_age_days: float = Field(30.0, gt=0)
    recent: int = Field(10_000, ge=10, le=1_000_000, description="journeys kept in memory for GET /v1/journeys")
    redis: str | None = Field(None, description="recent journeys also kept in Redis, so that every replica "
                                                "answers /v1/journeys for all: redis://…")
    otlp: Otlp | None = Field(None, description="export a span per journey, a child per phase, to a collector")


class ResponsesSettings(_Strict):
    store: str | None = Field("firsttoken-responses.db", description="SQLite file of the responses kept for "
                                                                      "previous_response_id; null: none kept")
    max_responses: int = Field(100_000, ge=100, description="the newest kept, the oldest forgotten first")
    max_age_days: float = Field(30.0, gt=0, description="how long a response can be continued (OpenAI: 30 days)")


class Settings(_Strict):
    listen: Listen = Field(default_factory=Listen)
    location: str | None = None
    upstreams: dict[str, Upstream] = Field(default_factory=dict)
    models: dict[str, list[str]] = Field(default_factory=dict)
    keys: list[ClientKey] = Field(default_factory=list)
    cache: Cache = Field(default_factory=Cache)  # on unless the config says `cache: false`
    routing: Routing = Field(default_factory=Routing)
    sizing: TaskSizing | None = None
    limits: Limits = Field(default_factory=Limits)
    streaming: Streaming = Field(default_factory=Streaming)
    journeys: Journeys = Field(default_factory=Journeys)
    spend: SpendSettings = Field(default_factory=SpendSettings)
    responses: ResponsesSettings = Field(default_factory=ResponsesSettings)
    sim: SimSettings | None = None  # an in-process simulated region; the upstream when none is configured
    cors: CorsSettings | None = None  # off unless set: browser apps from these origins may call the gateway
    dashboard: DashboardSettings = Field(default_factory=DashboardSettings)
    admin_key: SecretStr | None = Field(None, description="the operator's key: with client keys (or this key) "
                                                          "configured, /metrics, /v1/routing, every tenant's "
                                                          "journeys and the dashboard's data need it")
    _source: str = PrivateAttr("defaults")  # where the settings came from, for the start-up banner

    _location = field_validator("location")(lambda cls, value: _known_place(value))

    @model_validator(mode="before")
    @classmethod
    def _admin_key_moved(cls, data: Any) -> Any:
        """`dashboard.admin_key`, where the key lived before it guarded more than the dashboard, is read as
        `admin_key`, so older configs keep working."""
        dashboard = data.get("dashboard") if isinstance(data, dict) else None
        if not isinstance(dashboard, dict) or "admin_key" not in dashboard:
            return data
        if data.get("admin_key") is not None:
            raise ValueError("dashboard.admin_key: give the key once, as admin_key at the top of the config")
        rest = {k: v for k, v in dashboard.items() if k != "admin_key"}
        return {**data, "admin_key": dashboard["admin_key"], "dashboard": rest}

    @field_validator("admin_key")
    @classmethod
    def _admin_key_long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError("must be at least 16 characters: it unlocks every tenant's journeys")
        return value

    @field_validator("cache", mode="before")
    @classmethod
    def _cache_off(cls, value: object) -> object:
        return {"backend": "none"} if value is None or value is False else value

    @property
    def place(self) -> Place | None:
        """Where this gateway runs, when `location` says."""
        return None if self.location is None else resolve(self.location)

    @field_validator("upstreams")
    @classmethod
    def _upstream_names(cls, value: dict[str, Upstream]) -> dict[str, Upstream]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
                raise ValueError(f"upstream name {name!r} may hold only letters, digits, '-', '_' and '.'")
        return value

    @model_validator(mode="after")
    def _targets_exist(self) -> Settings:
        for alias, targets in self.models.items():
            if not targets:
                raise ValueError(f"models.{alias}: give at least one target like 'openai/gpt-4o-mini'")
            for target in targets:
                upstream, _, model = target.partition("/")
                if not model:
                    raise ValueError(f"models.{alias}: target {target!r} must be 'upstream/model'")
                if upstream not in self.upstreams and not (upstream == SIM_UPSTREAM and self.sim is not None):
                    known = ", ".join(sorted(self.upstreams)) or "none"
                    raise ValueError(
                        f"models.{alias}: target {target!r} names upstream {upstream!r}, "
                        f"which is not under upstreams (known: {known})"
                    )
        if self.sim is not None and SIM_UPSTREAM in self.upstreams:
            raise ValueError(f"upstreams.{SIM_UPSTREAM}: that name belongs to the region of the `sim:` section; "
                             "rename this upstream")
        names = [k.name for k in self.keys]
        if len(names) != len(set(names)):
            raise ValueError("keys: each client key needs its own name")
        admin = self.admin_key
        if admin is not None and any(k.key.get_secret_value() == admin.get_secret_value() for k in self.keys):
            raise ValueError("admin_key: it is also a client key; give the operator a key of its own")
        return self

    @property
    def source(self) -> str:
        return self._source

    @cached_property
    def simulated(self) -> SimSettings | None:
        """The in-process simulated region to run: the `sim:` section, or, when no upstream is configured at
        all, the offline default (Llama-3.1-8B on an H100 in Virginia, seen from `location` or Lagos)."""
        if self.sim is not None:
            return self.sim
        if self.upstreams:
            return None
        return sim_settings({"models": list(OFFLINE_MODELS), "region": OFFLINE_REGION,
                             "client_location": self.location or OFFLINE_LOCATION})

    def with_upstream(self, name: str, upstream: dict[str, Any]) -> Settings:
        """These settings plus one upstream (the in-process region, once its port is known)."""
        copy = self.model_copy(update={"upstreams": {**self.upstreams, name: Upstream.model_validate(upstream)}})
        copy._source = self._source
        return copy

    @property
    def loopback_only(self) -> bool:
        return is_loopback(self.listen.host)

    def secrets(self) -> list[str]:
        """Every credential these settings hold, to keep out of anything the gateway says or logs."""
        found = [k.key.get_secret_value() for k in self.keys]
        for upstream in self.upstreams.values():
            found += upstream.secrets()
        if self.journeys.otlp is not None:
            found += [value.get_secret_value() for value in self.journeys.otlp.headers.values()]
        found += _url_secrets(self.limits.redis or "") + _url_secrets(self.cache.url or "")
        found += _url_secrets(self.spend.redis or "")
        if self.admin_key is not None:
            found.append(self.admin_key.get_secret_value())
        return found


def _redis_url(value: str | None) -> str | None:
    if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("must be a Redis URL: redis://host:6379/0 (or rediss://, unix://)")
    return value


_AUTH_SCHEMES = frozenset({"bearer", "basic", "token", "negotiate", "digest", "apikey"})
_CREDENTIAL_HEADER = re.compile(r"auth|key|token|secret|cookie|password", re.IGNORECASE)


def _url_secrets(url: str) -> list[str]:
    """The password in a URL's user info (redis://:pw@host), with the Basic credential an HTTP client
    makes of the user info (an upstream may echo that header), and credentials in its query (?key=…)."""
    match = re.match(r"^[a-z]+://([^/@]*)@", url)
    found = []
    if match:
        user_info = unquote(match.group(1))
        found += [user_info.rpartition(":")[2], base64.b64encode(user_info.encode()).decode()]
    return found + re.findall(r"[?&][\w-]*(?:auth|key|token|secret|password)[\w-]*=([^&#]+)", url, re.IGNORECASE)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# --- environment expansion ----------------------------------------------------------------------

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(node: Any, environ: dict[str, str], path: str = "") -> Any:
    """Replace ${NAME} and ${NAME:-default} in every string of a parsed YAML tree."""
    if isinstance(node, dict):
        return {k: expand_env(v, environ, f"{path}.{k}" if path else str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [expand_env(v, environ, f"{path}[{i}]") for i, v in enumerate(node)]
    if not isinstance(node, str):
        return node

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        raise ConfigError(f"{path}: environment variable {name} is not set (set it, or write ${{{name}:-default}})")

    return _ENV_REF.sub(substitute, node)


# --- auto-configuration from the usual provider variables ---------------------------------------

# (variable, upstream name, base URL, wire format, region of its serving GPUs)
PROVIDER_ENV: tuple[tuple[str, str, str, str, str], ...] = (
    ("OPENAI_API_KEY", "openai", "https://api.openai.com/v1", "openai", "azure:eastus"),
    ("ANTHROPIC_API_KEY", "anthropic", "https://api.anthropic.com/v1", "anthropic", "gcp:us-east5"),
    ("GROQ_API_KEY", "groq", "https://api.groq.com/openai/v1", "openai", "aws:us-east-1"),
    ("OPENROUTER_API_KEY", "openrouter", "https://openrouter.ai/api/v1", "openai", "aws:us-east-1"),
    ("TOGETHER_API_KEY", "together", "https://api.together.xyz/v1", "openai", "aws:us-west-2"),
    ("MISTRAL_API_KEY", "mistral", "https://api.mistral.ai/v1", "openai", "azure:swedencentral"),
    ("DEEPSEEK_API_KEY", "deepseek", "https://api.deepseek.com/v1", "openai", "aws:ap-southeast-1"),
    ("GEMINI_API_KEY", "gemini", "https://generativelanguage.googleapis.com/v1beta/openai", "openai",
     "gcp:us-central1"),
)


def from_environment(environ: dict[str, str]) -> dict[str, Any]:
    upstreams: dict[str, Any] = {}
    for variable, name, url, api, region in PROVIDER_ENV:
        if environ.get(variable):
            upstreams[name] = {"url": url, "api": api, "key": environ[variable], "region": region}
    if "openai" in upstreams:
        upstreams["openai"]["responses"] = True  # OpenAI's own API serves Responses: they pass through to it
    return {"upstreams": upstreams}


OFFLINE_MODELS = ("llama-3.1-8b", "bge-small-en-v1.5")  # a chat model, and an encoder for /v1/embeddings
OFFLINE_REGION = "aws:us-east-1"
OFFLINE_LOCATION = "lagos"

NOTHING_CONFIGURED = (  # one paragraph: the terminal's width decides where it wraps
    "No upstream is configured, so the gateway serves a simulated region in this process. For real providers, "
    "set a provider key in the environment (OPENAI_API_KEY, ANTHROPIC_API_KEY, GROQ_API_KEY, OPENROUTER_API_KEY, "
    "TOGETHER_API_KEY, MISTRAL_API_KEY, DEEPSEEK_API_KEY or GEMINI_API_KEY), or write a firsttoken.yaml with an "
    "`upstreams:` entry such as `local: {url: http://127.0.0.1:8000/v1}` for any OpenAI-compatible server (vLLM, "
    "Ollama, llama.cpp) and pass it with --config.")


# --- loading ------------------------------------------------------------------------------------

def load(path: str | Path | None = None, environ: dict[str, str] | None = None,
         overrides: dict[str, Any] | None = None) -> Settings:
    """Settings from a YAML file, or from provider variables when there is none."""
    environ = dict(os.environ if environ is None else environ)
    if path is None and environ.get("FIRSTTOKEN_CONFIG"):
        path = environ["FIRSTTOKEN_CONFIG"]
    if path is None and Path("firsttoken.yaml").is_file():
        path = "firsttoken.yaml"
    if path is not None:
        path = Path(path)
        try:
            raw = yaml.safe_load(path.read_text()) or {}
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such file") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of keys such as upstreams:, models:")
        tree = expand_env(raw, environ)
        source = str(path)
    else:
        tree = from_environment(environ)
        source = "environment"
    for dotted, value in (overrides or {}).items():
        _set_dotted(tree, dotted, value)
    settings = validate(tree, source)
    settings._source = source
    return settings


def validate(tree: dict[str, Any], source: str = "config") -> Settings:
    try:
        return Settings.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(f"{source}: " + "; ".join(_describe(e) for e in exc.errors())) from None


def sim_settings(tree: dict[str, Any]) -> SimSettings:
    """A simulated region's settings from a `sim:` tree (file and flags merged), errors worded as for the file."""
    settings = validate({"sim": tree}, "sim settings")
    assert settings.sim is not None
    return settings.sim


def sim_tree(settings: Settings) -> dict[str, Any]:
    """The `sim:` keys a file set, to merge flags into."""
    return settings.sim.model_dump(exclude_unset=True) if settings.sim is not None else {}


def _describe(error: Any) -> str:
    where = ".".join(str(p) for p in error["loc"]) or "top level"
    if error["type"] == "extra_forbidden":
        parent = error["loc"][:-1]
        return f"unknown key {where!r} (check the spelling; {_known_keys(parent)})"
    if error["type"] == "missing":
        return f"{where}: required key is missing"
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}"


def _known_keys(parent: tuple[Any, ...]) -> str:
    model = _model_at(parent)
    if model is None:
        return "see the README for the keys"
    return "known keys here: " + ", ".join(model.model_fields)


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The settings model found by following an error location (through dicts, lists, optionals)."""
    current: Any = Settings
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return None
            current = field.annotation
        else:  # dict[str, X] or list[X]: step into the value type
            args = getattr(current, "__args__", ())
            current = args[-1] if args else None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    """X | None → X."""
    args = [a for a in getattr(annotation, "__args__", ()) if a is not type(None)]
    if type(None) in getattr(annotation, "__args__", ()) and len(args) == 1:
        return args[0]
    return annotation


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = tree
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
