"""The YAML schema, as pydantic v2 models.

Every model forbids unknown keys so a typo is an error naming its YAML path, not a silently
ignored setting. Cross-references (a decision naming a model or signal) are checked in
``loader.py`` after parsing, so all errors of a file are reported together.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$"
HOST_PORT_PATTERN = r"^[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}$"



def _port_in_range(value: str) -> str:
    # The pattern allows five digits; Envoy rejects a port above 65535 only at start-up.
    if int(value.rpartition(":")[2]) > 65535:
        raise ValueError("port must be 0-65535")
    return value


Name = Annotated[str, Field(pattern=NAME_PATTERN)]
HostPort = Annotated[str, Field(pattern=HOST_PORT_PATTERN), AfterValidator(_port_in_range)]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BackendRef(Strict):
    """One endpoint serving a model (the vLLM Semantic Router provider fragment's shape)."""

    name: Name
    endpoint: HostPort
    protocol: Literal["http", "https"] = "http"
    provider: str = "vllm"
    weight: int = Field(default=1, ge=1, le=128)
    # the backend's API key, read from this environment variable at start-up
    api_key_env: EnvName | None = None


class ProviderModel(Strict):
    name: Name
    provider_model_id: Annotated[str, Field(min_length=1, max_length=256)]
    api_format: Literal["openai"] = "openai"
    backend_refs: list[BackendRef] = Field(min_length=1)
    # PII entity types this model may receive (e.g. [EMAIL_ADDRESS]); unset = no limit.
    # Requests carrying other types are refused (403 pii_not_allowed); needs a pii signal.
    pii_allowed: list[Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]{0,63}$")]] | None = None

    @field_validator("provider_model_id")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.isprintable() or any(c.isspace() for c in value):
            raise ValueError("must be printable with no whitespace")
        return value


class ProviderDefaults(Strict):
    model: Name


class Providers(Strict):
    defaults: ProviderDefaults
    models: list[ProviderModel] = Field(min_length=1)


class AuthSettings(Strict):
    """Client API keys, checked by Envoy's api_key_auth filter: a file (one key per line,
    optionally ``client:key``) and/or an environment variable (comma-separated). Keys are
    never written in the router config itself."""

    api_keys_file: str | None = None
    api_keys_env: EnvName | None = None

    @model_validator(mode="after")
    def _a_source(self) -> AuthSettings:
        if self.api_keys_file is None and self.api_keys_env is None:
            raise ValueError("set api_keys_file, api_keys_env or both")
        return self


class TlsSettings(Strict):
    """TLS for the router's gRPC and admin ports; Envoy verifies the router against
    ``ca_file`` (default: the system trust store) and ``server_name`` (default: the gRPC host)."""

    cert_file: str
    key_file: str
    ca_file: str | None = None
    server_name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9.\-:]{1,253}$")


_ORIGIN = r"^(\*|https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?)$"  # as a browser's Origin header


class CorsSettings(Strict):
    """Browser clients on other origins: Envoy answers their preflight and marks answers."""

    allow_origins: list[Annotated[str, Field(pattern=_ORIGIN)]] = Field(min_length=1,
                                                                          max_length=64)
    max_age_s: int = Field(default=600, ge=0, le=86400)


class ListenerSettings(Strict):
    address: HostPort = "127.0.0.1:8899"
    admin: HostPort = "127.0.0.1:9901"
    max_request_bytes: int = Field(default=8 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024)
    # Envoy's stream_idle_timeout: a request whose backend sends nothing for this long gets
    # a 504 (Envoy's default, 300 s, cut long non-streamed generations); 0 = never
    stream_idle_timeout_s: float = Field(default=900.0, ge=0, le=86400)
    # how long a client may take to send its request (Envoy's request_headers_timeout and
    # request_timeout; the latter is disarmed once the request is in); 0 = no limit
    request_headers_timeout_s: float = Field(default=10.0, ge=0, le=3600)
    request_timeout_s: float = Field(default=300.0, ge=0, le=86400)
    auth: AuthSettings | None = None
    cors: CorsSettings | None = None


class ProbeSettings(Strict):
    """Backend readiness probes: ``GET /v1/models`` on every endpoint, every ``interval_s``;
    a failing endpoint backs off (doubling) up to ``max_backoff_s``. Start-up waits at most
    ``startup_timeout_s`` for the first round."""

    interval_s: float = Field(default=5.0, gt=0, le=3600)
    timeout_s: float = Field(default=2.0, gt=0, le=60)
    max_backoff_s: float = Field(default=30.0, gt=0, le=3600)
    startup_timeout_s: float = Field(default=3.0, ge=0, le=120)


TextSourceName = Literal["last_user", "recent_user", "all_user", "conversation", "tools",
                         "instructions", "assistant", "tool_results"]


class RouterSettings(Strict):
    grpc: HostPort = "127.0.0.1:50051"
    admin: HostPort = "127.0.0.1:8080"
    auto_model_names: list[Name] = Field(default_factory=lambda: ["auto"], min_length=1)
    failure_mode: Literal["closed", "open"] = "closed"
    unknown_paths: Literal["passthrough", "reject"] = "reject"
    # path prefixes always passed through untouched to the default model (e.g. /v1/embeddings)
    passthrough_paths: list[Annotated[str, Field(pattern=r"^/[!-~]{0,255}$")]] = Field(
        default_factory=list, max_length=64)
    text_source: TextSourceName = "last_user"
    on_overload: Literal["default", "reject"] = "default"
    message_timeout_ms: int = Field(default=5000, ge=50, le=60_000)
    # shadow: decide, log and count, but change nothing (requests go to the default model)
    mode: Literal["enforce", "shadow"] = "enforce"
    # requests naming a model also face the decisions that block (jailbreak, PII refusals)
    guard_explicit_models: bool = True
    # return per-signal results in x-semantic-router-debug when the client sends that header
    debug_header: bool = False
    # End each ext_proc stream once the request is routed: the rendered filter skips the
    # response phases. Set false if your Envoy sends response headers to the router.
    end_streams_after_request: bool = True
    # POSTs with a body to the OpenAI endpoints reach the router as ONE ext_proc message (the
    # body, with the headers the router reads sent as request attributes) instead of two: a
    # per-route override in the rendered config. Not with api_key_env or set_headers (they
    # need a headers phase). Routes of your own without the override still work.
    one_message_requests: bool = True
    # on SIGTERM: health turns not-ready, then in-flight streams get this long to finish
    shutdown_grace_s: float = Field(default=30.0, ge=0, le=3600)
    # Backends and workers (extproc/prober.py, extproc/workers.py, extproc/eds.py).
    endpoint_discovery: Literal["static", "eds"] = "static"
    health_check_path: str | None = Field(default="/health", pattern=r"^/[!-~]{0,255}$")
    admin_token_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    state_dir: str | None = None
    probe: ProbeSettings = ProbeSettings()
    tls: TlsSettings | None = None


class BatchingConfig(Strict):
    max_batch_size: int = Field(default=32, ge=1, le=1024)
    max_wait_ms: float = Field(default=2.0, ge=0, le=1000)
    max_queue: int = Field(default=512, ge=1, le=100_000)
    timeout_ms: float = Field(default=2000.0, gt=0, le=60_000)
    workers: Annotated[int, Field(ge=1, le=64)] | Literal["auto"] = "auto"

    @field_validator("workers", mode="wrap")
    @classmethod
    def _one_workers_message(
        cls, value: Any, handler: ValidatorFunctionWrapHandler
    ) -> int | str:
        try:
            return handler(value)
        except ValidationError:  # one message instead of one per member of the union
            raise ValueError(f"expected auto or a count in [1, 64], got {value!r}") from None


class LongPromptsConfig(Strict):
    min_tokens: int = Field(default=192, ge=2, le=1_000_000)
    encoder_adapter: str = Field(default="bundled", min_length=1)
    quantize_int8: bool = True
    escalate_at: float = Field(default=0.5, ge=0, le=1)


class ClassifiersConfig(Strict):
    device: str = Field(default="auto", pattern=r"^(auto|cpu|cuda|cuda:[0-9]+)$")
    encoder: str | None = None
    encoder_adapter: str | None = "bundled"
    max_length: int = Field(default=256, ge=16, le=8192)
    max_windows: int = Field(default=8, ge=1, le=64)
    quantize_int8: bool = False
    trace: Literal["cpu", "always", "never"] = "cpu"
    batching: BatchingConfig = BatchingConfig()
    long_prompts: LongPromptsConfig | None = None


OnError = Literal["ignore", "match", "reject"]


class SignalBase(Strict):
    name: Name
    on_error: OnError = "ignore"


class TextSourced(Strict):
    """A signal that reads the request's text; ``None`` reads ``router.text_source``."""

    text_source: TextSourceName | None = None


class KeywordSignal(SignalBase, TextSourced):
    type: Literal["keyword"]
    keywords: list[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(min_length=1)
    regex: bool = False
    case_sensitive: bool = False
    word_boundary: bool = True
    match: Literal["any", "all"] = "any"
    read_obfuscated: bool = False


class ContextLengthSignal(SignalBase):
    type: Literal["context_length"]
    min_tokens: int | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _bounds(self) -> ContextLengthSignal:
        if self.min_tokens is None and self.max_tokens is None:
            raise ValueError("set min_tokens, max_tokens or both")
        if (
            self.min_tokens is not None
            and self.max_tokens is not None
            and self.min_tokens > self.max_tokens
        ):
            raise ValueError("min_tokens is greater than max_tokens")
        return self


class LearnedSignal(SignalBase, TextSourced):
    """A signal computed by a classifier: domain and jailbreak heads, embedding similarity,
    or a sequence/token classification model."""

    type: Literal["domain", "jailbreak", "embedding", "sequence", "token"]
    model: str | None = None
    threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    examples: dict[Name, list[str]] = Field(default_factory=dict)
    device: str | None = Field(default=None, pattern=r"^(auto|cpu|cuda|cuda:[0-9]+)$")
    fallback_keywords: list[Annotated[str, Field(min_length=1, max_length=512)]] | None = None
    escalate_at: float | None = Field(default=None, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _examples_only_for_embedding(self) -> LearnedSignal:
        if self.type == "embedding" and not self.examples:
            raise ValueError("an embedding signal needs examples: {label: [utterances]}")
        if self.type != "embedding" and self.examples:
            raise ValueError("examples are only for embedding signals")
        if self.type != "jailbreak" and self.escalate_at is not None:
            raise ValueError("escalate_at is only for jailbreak signals")
        return self


class PiiSignal(SignalBase, TextSourced):
    """Structured PII (pattern recognizers with validators): matched when any wanted type is
    found;
    a rule's ``label`` names one entity type (``{signal: pii, label: CREDIT_CARD}``)."""

    type: Literal["pii"]
    entity_types: list[str] | None = None
    threshold: float = Field(default=0.5, ge=0.0, le=1.0)


class LanguageSignal(SignalBase, TextSourced):
    """The prompt's language (py3langid, 97 languages): label is the ISO 639-1 code, score its
    probability; a rule's ``label`` names one (``{signal: lang, label: de}``)."""

    type: Literal["language"]
    languages: list[Annotated[str, Field(pattern=r"^[a-z]{2,3}$")]] | None = None
    threshold: float = Field(default=0.5, ge=0.0, le=1.0)


Signal = Annotated[
    KeywordSignal | ContextLengthSignal | LearnedSignal | PiiSignal | LanguageSignal,
    Field(discriminator="type"),
]


class RuleNode(Strict):
    """Exactly one of: a signal leaf (``signal`` with optional ``label``/``min_score``),
    ``all``, ``any`` or ``not``."""

    signal: Name | None = None
    label: str | None = None
    min_score: float | None = Field(default=None, ge=0.0, le=1.0)
    all: list[RuleNode] | None = None
    any: list[RuleNode] | None = None
    not_: RuleNode | None = Field(default=None, alias="not")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _one_kind(self) -> RuleNode:
        kinds = [k for k in ("signal", "all", "any", "not_") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("a rule has exactly one of: signal, all, any, not")
        if self.signal is None and (self.label is not None or self.min_score is not None):
            raise ValueError("label and min_score belong to a signal rule")
        for key in ("all", "any"):
            children = getattr(self, key)
            if children is not None and not children:
                raise ValueError(f"'{key}' needs at least one rule")
        return self


HeaderName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")]
HeaderValue = Annotated[str, Field(pattern=r"^[\x20-\x7e]{0,1024}$")]


class BlockPlugin(Strict):
    """Refuse the request: an OpenAI-style error (default 403), or, for clients that need a
    200, a canned assistant reply (``respond: completion``)."""

    status: int = Field(default=403, ge=400, le=499)
    code: Annotated[str, Field(pattern=r"^[a-z0-9_]{1,64}$")] = "blocked"
    message: Annotated[str, Field(min_length=1, max_length=1024)] = (
        "this request was blocked by the gateway's policy")
    respond: Literal["error", "completion"] = "error"


class SystemPromptPlugin(Strict):
    text: Annotated[str, Field(min_length=1, max_length=32_768)]
    mode: Literal["insert", "replace"] = "insert"


class Plugins(Strict):
    block: BlockPlugin | None = None
    system_prompt: SystemPromptPlugin | None = None
    set_headers: dict[HeaderName, HeaderValue] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _block_alone(self) -> Plugins:
        if self.block is not None and (self.system_prompt is not None or self.set_headers):
            raise ValueError("block ends the request; it cannot be combined with other plugins")
        for name in self.set_headers:
            if name.startswith("x-semantic-router-") or name in _RESERVED_HEADERS:
                raise ValueError(f"set_headers: '{name}' is reserved")
        return self


_RESERVED_HEADERS = frozenset({"content-length", "content-type", "host", "authorization",
                               "transfer-encoding", "connection", "te", "upgrade"})


class Decision(Strict):
    # also an Envoy virtual cluster (stats) name and a header value: no "/" or ":"
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    priority: int = 0
    rules: RuleNode
    model: Name | None = None
    mode: Literal["enforce", "shadow"] = "enforce"
    plugins: Plugins = Plugins()

    @model_validator(mode="after")
    def _target(self) -> Decision:
        if self.model is None and self.plugins.block is None:
            raise ValueError("a decision needs a model unless it blocks")
        return self


class RouterFile(Strict):
    """The whole YAML file."""

    version: Literal[1] = 1
    listener: ListenerSettings = ListenerSettings()
    router: RouterSettings = RouterSettings()
    classifiers: ClassifiersConfig = ClassifiersConfig()
    providers: Providers
    signals: list[Signal] = Field(default_factory=list)
    decisions: list[Decision] = Field(default_factory=list)
    # Static worker registrations: a list of worker documents (the POST /v1/workers shape),
    # or a directory of *.json files holding one each; checked in extproc/workers.py.
    workers: list[dict[str, Any]] | str = Field(default_factory=list)
