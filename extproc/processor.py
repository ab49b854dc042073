"""Per-stream processing: one object per ext_proc stream (one HTTP request), one method per
phase. It records what to change as ``Mutations``; only ``envoy_adapter`` builds protos.

Errors raised by a phase are ``RouterError``s and become OpenAI-style immediate responses in
``handle``; nothing a client sends can make this module raise anything else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final
from urllib.parse import unquote

from classifiers.api import Overloaded
from extproc import envoy_adapter as adapter
from extproc.config.runtime import ModelTarget
from extproc.context import RouterState, large_body_slot
from extproc.decision import NO_PLUGINS, DecisionPlugins, SignalResult
from extproc.envoy_adapter import Mutations, Phase, RequestMessage
from extproc.errors import (
    BadRequest,
    Blocked,
    MethodNotAllowed,
    ModelNotFound,
    NotFound,
    PayloadTooLarge,
    RouterError,
    TooManyRequests,
    UnsupportedMediaType,
)
from extproc.names import (
    AUTHORIZATION_HEADER,
    CLUSTER_HEADER,
    DEBUG_HEADER,
    DECISION_HEADER,
    DEFAULT_DECISION,
    EXPLICIT_DECISION,
    HEADER_ATTRIBUTES,
    IMMEDIATE_DETAILS,
    METADATA_NAMESPACE,
    MODEL_HEADER,
    MODELS_PATH,
    REQUEST_ID_HEADER,
)
from extproc.openai_request import Endpoint, OpenAIRequest, parse_request
from extproc.plugins import blocked_error, canned_reply, debug_summary, with_system_prompt
from extproc.secretscan import redacted
from extproc.signals.specs import estimate_tokens

_JSON = {"content-type": "application/json"}
READ_HEADERS: Final = frozenset(name.encode() for name in HEADER_ATTRIBUTES)
"""The only request headers the processor reads; the servicer parses nothing else."""
_MODELS_PREFIX = MODELS_PATH + "/"
_PHASE_LABELS: Final = {phase: phase.value for phase in Phase}  # .value is a slow property
_MAX_BODY_ANSWERS = 1024  # keys come from config (decisions x models x outcomes): a bound
REQUEST_ID_MAX_CHARS = 128


@dataclass(frozen=True, slots=True)
class Route:
    """Where a request went and why; read by the response-headers phase and the logs."""

    decision: str
    model: str
    outcome: str
    reason: str = ""
    plugins: DecisionPlugins = NO_PLUGINS
    shadowed: tuple[str, ...] = ()
    debug: str = ""
    pii: frozenset[str] = frozenset()
    """PII entity types found (only when a pii signal ran)."""
    signal_errors: tuple[tuple[str, str], ...] = ()
    """(signal, error kind) for each signal that failed and took its ``on_error``."""


_HEADER_ATTRIBUTES: Final = tuple(HEADER_ATTRIBUTES.items())


def _signal_errors(results: Mapping[str, SignalResult]) -> tuple[tuple[str, str], ...]:
    """(signal, error kind) of each failed signal, for the route and its log line."""
    return tuple((r.name, r.error) for r in results.values() if r.error)

# The share of Envoy's message timeout kept for answering after the classifiers' wait ends.
REPLY_MARGIN: Final = 0.1


def _attribute_headers(attributes: Mapping[str, str]) -> dict[str, str]:
    """The headers the router reads, rebuilt from the attributes Envoy sends with the body
    when the route skips the headers phase (one ext_proc message per request)."""
    return {
        name: attributes[expression]
        for name, expression in _HEADER_ATTRIBUTES
        if expression in attributes
    }


class StreamProcessor:
    def __init__(self, state: RouterState, logger: logging.Logger) -> None:
        self._state = state
        self._config = state.config  # a snapshot: a reload never changes a request mid-way
        self._logger = logger
        self._endpoint: Endpoint | None = None
        self._request_id = ""
        self._debug = False
        self.finished = False
        """True once Envoy will send nothing more on this stream, so the servicer can end
        the call itself (Envoy otherwise resets it, and grpcio leaks a little per reset)."""
        self.route: Route | None = None
        self._counted = False  # semantic_router_requests_total counts each request once

    @property
    def request_id(self) -> str:
        """The request's x-request-id; empty before its headers were read or without one."""
        return self._request_id

    async def handle(self, message: RequestMessage) -> bytes:
        """The response bytes for one message; a ``RouterError`` becomes an OpenAI error."""
        started = time.perf_counter()
        phase = message.phase
        try:
            if phase is Phase.REQUEST_HEADERS:
                return self.on_request_headers(message)
            if phase is Phase.REQUEST_BODY:
                if self._endpoint is None and message.attributes:
                    answered = self._on_headers(_attribute_headers(message.attributes),
                                                not message.body)
                    if self._endpoint is None:  # /v1/models answered, or a passthrough path
                        if self.route is None:
                            return adapter.continue_response(Phase.REQUEST_BODY)
                        return answered
                return await self.on_request_body(message)
            if phase is Phase.RESPONSE_HEADERS:
                return self.on_response_headers()
            return adapter.continue_response(phase)
        except RouterError as err:
            self.finished = True  # an immediate response ends the exchange
            if not self._counted:  # a block decision was already counted as "blocked"
                self._state.metrics.rejected(type(err).__name__)
            self._logger.info(
                "request rejected",
                extra={
                    "request_id": self._request_id,
                    "status": err.status,
                    "code": err.code,
                    "error": err.message,
                },
            )
            return adapter.immediate_response(
                err.status, err.body(), {**_JSON, **err.headers}, IMMEDIATE_DETAILS
            )
        finally:
            self._state.metrics.phase_seconds(_PHASE_LABELS[phase], time.perf_counter() - started)

    def on_request_headers(self, message: RequestMessage) -> bytes:
        return self._on_headers(message.headers, message.end_of_stream)

    def _on_headers(self, headers: Mapping[str, str], end_of_stream: bool) -> bytes:
        # Clients may send their own id: logged, so bounded (Envoy generates 36 characters)
        self._request_id = headers.get(REQUEST_ID_HEADER, "")[:REQUEST_ID_MAX_CHARS]
        self._debug = self._config.router.debug_header and headers.get(DEBUG_HEADER, "") not in (
            "", "0", "false")
        method = headers.get(":method", "")
        path = headers.get(":path", "").partition("?")[0]
        if path == MODELS_PATH or path.startswith(_MODELS_PREFIX):
            return self._models(method, path)
        endpoint = self._state.endpoints.get(path)
        if endpoint is None:
            router = self._config.router
            if router.unknown_paths == "passthrough" or path.startswith(
                tuple(router.passthrough_paths)
            ):
                self.finished = True  # the mode override skips every later phase
                return adapter.skip_rest_response()
            raise NotFound(f"unknown path '{path[:200]}'", code="unknown_url")
        if method != "POST":
            raise MethodNotAllowed(f"{path} only supports POST", headers={"allow": "POST"})
        self._check_entity_headers(headers)
        if end_of_stream:
            raise BadRequest("request body is required")
        self._endpoint = endpoint
        return adapter.continue_response(Phase.REQUEST_HEADERS)

    def _check_entity_headers(self, headers: Mapping[str, str]) -> None:
        get = headers.get
        content_type = get("content-type", "").split(";")[0].strip().lower()
        if (
            content_type
            and content_type != "application/json"
            and not content_type.endswith("+json")
        ):
            raise UnsupportedMediaType(
                f"content type '{content_type[:100]}' is not supported; send application/json"
            )
        encoding = get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            raise UnsupportedMediaType(f"content encoding '{encoding[:100]}' is not supported")
        length = get("content-length", "")
        # ASCII only: "²".isdigit() is true, but int() refuses it
        limit = self._config.listener.max_request_bytes
        if length.isascii() and length.isdigit() and int(length) > limit:
            raise self._too_large()

    def _too_large(self) -> PayloadTooLarge:
        limit = self._config.listener.max_request_bytes
        return PayloadTooLarge(f"request body is larger than the limit of {limit} bytes")

    def _models(self, method: str, path: str) -> bytes:
        if method not in ("GET", "HEAD"):
            raise MethodNotAllowed(f"{MODELS_PATH} only supports GET", headers={"allow": "GET"})
        # SDKs percent-encode the id (retrieve("vllm-sr/auto") asks for vllm-sr%2Fauto). It is
        # decoded once and only looked up among the configured names, so whatever it decodes
        # to (NUL, "/..", invalid UTF-8 as U+FFFD) is just an unknown model.
        name = unquote(path[len(_MODELS_PREFIX) :])
        bodies = self._state.model_bodies
        body = self._state.models_body if path == MODELS_PATH else bodies.get(name)
        if body is None:
            raise ModelNotFound(f"The model '{redacted(name)}' does not exist.", param="model")
        self.route = Route("models", "", "answered")
        self.finished = True
        return adapter.immediate_response(200, body, _JSON, IMMEDIATE_DETAILS)

    async def on_request_body(self, message: RequestMessage) -> bytes:
        if self._endpoint is None:
            return adapter.continue_response(Phase.REQUEST_BODY)
        if len(message.body) > self._config.listener.max_request_bytes:
            raise self._too_large()
        async with large_body_slot(self._state, len(message.body)):
            return await self._routed_body(message)

    async def _routed_body(self, message: RequestMessage) -> bytes:
        assert self._endpoint is not None
        started = time.perf_counter()
        request = parse_request(message.body, self._endpoint)
        parsed = time.perf_counter()
        route = await self._route(request, started)
        self.route = route
        refused = self._pii_refused(route)
        self._record(replace(route, outcome="blocked", reason="pii_not_allowed")
                     if refused else route, request, parse_s=parsed - started,
                     route_s=time.perf_counter() - parsed)
        # the rendered filter skips response headers: the answer below is the last message
        self.finished = self._config.router.end_streams_after_request
        if route.outcome == "shadow":  # observe only: nothing is rewritten or routed
            shadow: dict[str, str | float | bool] = {
                "outcome": "shadow", "shadowed": ",".join(route.shadowed)}
            if route.debug:
                shadow["debug"] = route.debug
            return adapter.continue_response(Phase.REQUEST_BODY, Mutations(
                set_headers=self._backend_auth(self._config.default_model.name),
                dynamic_metadata={METADATA_NAMESPACE: shadow}))
        block = route.plugins.block
        if block is not None:
            if block.respond == "error":
                raise blocked_error(block, route.decision)
            self.finished = True
            body, headers = canned_reply(block, request)
            headers[DECISION_HEADER] = route.decision
            return adapter.immediate_response(200, body, headers, IMMEDIATE_DETAILS)
        target = self._config.models[route.model]
        if refused:
            self.finished = True
            raise Blocked(f"model '{target.name}' may not receive {', '.join(refused)}; "
                          "remove it and retry", code="pii_not_allowed",
                          headers={DECISION_HEADER: route.decision})
        prompt = route.plugins.system_prompt
        messages = None
        if prompt is not None and request.endpoint is Endpoint.CHAT:  # chat only (README)
            messages = with_system_prompt(request.raw_messages, prompt)
        body = request.rewrite(target.provider_model_id, messages)
        return self._routed_answer(route, target).render(body)

    def _routed_answer(self, route: Route, target: ModelTarget) -> adapter.BodyTemplate:
        """The routed body answer but for its body. Its headers and metadata follow from the
        key below and the state's config alone, so it is built once per key and state (a
        debug summary differs per request: never kept)."""
        key = (route.decision, route.model, route.outcome, route.shadowed,
               route.plugins.set_headers)
        answers = self._state.body_answers
        answer = None if route.debug else answers.get(key)
        if answer is None:
            # the plugin's headers first; ours overwrite any of the same name in place
            headers = dict(route.plugins.set_headers)
            headers[CLUSTER_HEADER] = target.cluster
            headers.update(self._backend_auth(target.name))
            headers[DECISION_HEADER] = route.decision
            answer = adapter.body_template(Phase.REQUEST_BODY, Mutations(
                set_headers=headers, clear_route_cache=True,
                dynamic_metadata={METADATA_NAMESPACE: self._metadata(route, target.cluster)}))
            if not route.debug and len(answers) < _MAX_BODY_ANSWERS:
                answers[key] = answer
        return answer

    def _pii_refused(self, route: Route) -> list[str]:
        """PII entity types found that the target model may not receive (``pii_allowed``)."""
        target = self._config.models.get(route.model)
        if (target is None or target.pii_allowed is None or route.outcome == "shadow"
                or route.plugins.block is not None):
            return []
        return sorted(route.pii - target.pii_allowed)

    def _backend_auth(self, model: str) -> dict[str, str]:
        """The model's own credentials (``api_key_env``), replacing whatever came upstream."""
        value = self._state.backend_auth.get(model)
        return {AUTHORIZATION_HEADER: value} if value else {}

    @staticmethod
    def _metadata(route: Route, cluster: str) -> dict[str, str | float | bool]:
        """Read by Envoy's access log, by the virtual host's response_headers_to_add
        (x-semantic-router-model, -decision and, when asked for, -debug) and, on one-message
        routes, by the Lua filter that routes on ``cluster`` (Envoy drops header mutations
        there)."""
        metadata: dict[str, str | float | bool] = {
            "decision": route.decision, "model": route.model, "outcome": route.outcome,
            "shadowed": ",".join(route.shadowed), "cluster": cluster}
        if route.debug:
            metadata["debug"] = route.debug
        return metadata

    def _record(self, route: Route, request: OpenAIRequest, *, parse_s: float,
                route_s: float) -> None:
        metrics = self._state.metrics
        self._counted = True
        metrics.routed(route.outcome, route.reason, route.decision, route.model)
        for name in route.shadowed:
            metrics.shadowed(name)
        fields = {
            "request_id": self._request_id, "decision": route.decision, "model": route.model,
            "outcome": route.outcome, "reason": route.reason, "shadowed": list(route.shadowed),
            "requested": request.model[:200], "stream": request.stream,
            "parse_ms": round(parse_s * 1000, 3), "route_ms": round(route_s * 1000, 3)}
        if route.signal_errors:  # even when another signal decided: a failure is never silent
            fields["signal_errors"] = dict(route.signal_errors)
        self._logger.info("routed", extra=fields)

    def _classifier_wait_s(self, started: float) -> float:
        """How long the learned signals may take for a body that arrived at ``started``: the
        classifiers' timeout, but never past Envoy's message timeout less ``REPLY_MARGIN`` of
        it, so a slow batch ends in the signals' ``on_error`` (a routed request, counted)
        rather than in Envoy's 504."""
        envoy_s = self._config.router.message_timeout_ms / 1000
        left = envoy_s * (1 - REPLY_MARGIN) - (time.perf_counter() - started)
        return max(0.0, min(self._config.classifiers.batching.timeout_ms / 1000, left))

    async def _guard(
        self, request: OpenAIRequest, model: str, started: float
    ) -> tuple[Route | None, Mapping[str, SignalResult]]:
        """A request naming a model faces the blocking decisions (jailbreak, PII refusals) on
        the signals they read: the blocked route, or None to route it to its model, and the
        signals' results. An overloaded classifier lets it through (the model was named, no
        routing is lost) unless ``router.on_overload`` is ``reject``."""
        guard = self._state.guard
        assert guard is not None
        text = request.classifier_text(self._state.text_source)
        tokens = estimate_tokens(request.total_text_length()) if guard.needs_tokens else 0
        try:
            results = await guard.evaluate(text, tokens, request.classifier_text_for,
                                           self._classifier_wait_s(started))
        except Overloaded as err:
            if self._config.router.on_overload == "reject":
                raise TooManyRequests("the router is overloaded; retry shortly") from err
            return None, {}
        outcome = self._state.guard_decide(results)
        if outcome.plugins.block is None or self._config.router.mode == "shadow":
            return None, results
        self._state.refuse_unchecked(outcome, results)
        return Route(outcome.decision, model, "blocked", plugins=outcome.plugins,
                     signal_errors=_signal_errors(results)), results

    async def _explicit(self, request: OpenAIRequest, started: float) -> Route:
        """A request naming a model: to that model, unless a blocking decision refuses it."""
        config = self._config
        target = config.resolve_explicit(request.model)
        if target is None:
            raise ModelNotFound(  # a key pasted into "model" is neither logged nor echoed
                f"The model '{redacted(request.model)}' does not exist.", param="model")
        guarded: Mapping[str, SignalResult] = {}
        if self._state.guard is not None:
            blocked, guarded = await self._guard(request, target.name, started)
            if blocked is not None:
                return blocked
        pii: frozenset[str] = frozenset()
        errors: tuple[tuple[str, str], ...] = ()
        if target.pii_allowed is not None and config.pii_signal is not None:
            try:
                found = guarded.get(config.pii_signal) or await self._state.evaluator.pii(
                    config.pii_signal, request.classifier_text(self._state.text_source),
                    request.classifier_text_for)  # the guard's scan, when it had one
            except Overloaded as err:  # no PII verdict in time on a busy host: not allowed on
                raise TooManyRequests("the router is overloaded; retry shortly") from err
            pii = found.labels if found is not None else frozenset()
            if found is not None and found.error:
                errors = ((found.name, found.error),)
        return Route(EXPLICIT_DECISION, target.name, "explicit", pii=pii, signal_errors=errors)

    async def _route(self, request: OpenAIRequest, started: float) -> Route:
        config = self._config
        if request.model not in config.auto_names:
            return await self._explicit(request, started)
        text = request.classifier_text(self._state.text_source)
        evaluator = self._state.evaluator
        tokens = estimate_tokens(request.total_text_length()) if evaluator.needs_tokens else 0
        default = config.default_model.name
        try:
            results = await evaluator.evaluate(text, tokens, request.classifier_text_for,
                                               self._classifier_wait_s(started))
        except Overloaded as err:
            if config.router.on_overload == "reject":
                raise TooManyRequests("the router is overloaded; retry shortly") from err
            return Route(DEFAULT_DECISION, default, "unclassified", "overloaded")
        outcome = self._state.decide(results)
        debug = debug_summary(outcome.decision, results) if self._debug else ""
        errors = _signal_errors(results)
        if config.router.mode == "shadow":
            return Route(outcome.decision, outcome.model or "", "shadow",
                         shadowed=(*outcome.shadowed, outcome.decision), debug=debug,
                         signal_errors=errors)
        self._state.refuse_unchecked(outcome, results)
        reason = ""
        if outcome.plugins.block is not None:
            kind = "blocked"
        elif outcome.matched:
            kind = "routed"
        elif failed := sorted({error for _, error in errors}):
            # the default model because a signal could not say: never silent
            kind, reason = "unclassified", failed[0]
        else:
            kind = "default"
        pii_result = results.get(config.pii_signal) if config.pii_signal else None
        return Route(outcome.decision, outcome.model or "", kind, reason, plugins=outcome.plugins,
                     shadowed=outcome.shadowed, debug=debug,
                     pii=pii_result.labels if pii_result is not None else frozenset(),
                     signal_errors=errors)

    def on_response_headers(self) -> bytes:
        self.finished = True  # response bodies are never sent to the router
        route = self.route
        if route is None or route.outcome in ("answered", "shadow"):
            if route is not None and route.debug:
                mutations = Mutations(set_headers={DEBUG_HEADER: route.debug})
                return adapter.continue_response(Phase.RESPONSE_HEADERS, mutations)
            return adapter.continue_response(Phase.RESPONSE_HEADERS)
        headers = {MODEL_HEADER: route.model, DECISION_HEADER: route.decision}
        if route.debug:
            headers[DEBUG_HEADER] = route.debug
        return adapter.continue_response(Phase.RESPONSE_HEADERS, Mutations(set_headers=headers))
