"""One line per settable key of ``schema.py``: the meaning column of the configuration reference.

Keyed by the reference's path (``reference.py`` builds the paths: ``a.b``, ``a[].b``,
``signals[type=keyword].keywords``). A schema field without an entry here (or a
``description=``) makes ``semantic-router config reference`` fail, and so the README test.
"""

from __future__ import annotations

_LEARNED = "signals[type=domain,jailbreak,embedding,sequence,token]"
_TEXT_SOURCE = ("what this signal reads, overriding `router.text_source` (e.g. `all_user` for "
                "a guard that must see every user turn; `tools`: the names of the tools the "
                "request offers, one per line; `instructions`: the system and developer "
                "messages, a Responses request's `instructions`, and vLLM's `chat_template` "
                "and `chat_template_kwargs` strings; `assistant`: the "
                "assistant turns the client sends back, tool calls included; `tool_results`: "
                "tool and function results, and vLLM's `documents`); unset: "
                "`router.text_source`")
_BACKEND = "providers.models[].backend_refs[]"

DESCRIPTIONS: dict[str, str] = {
    "version": "schema version; only `1` exists",
    # listener: Envoy (used by `envoy render` and `serve --with-envoy`)
    "listener.address": "the Envoy listener clients send OpenAI requests to",
    "listener.admin": "Envoy's admin interface (`/stats`, `/config_dump`); read by `status`",
    "listener.max_request_bytes": "request body cap (default 8 MiB); Envoy's buffer is raised "
        "to match so the router answers 413 in JSON",
    "listener.stream_idle_timeout_s": "a request whose backend sends nothing for this many "
        "seconds gets a 504 `timeout` error with `x-should-retry: false` (Envoy's "
        "`stream_idle_timeout`; its own default, 300 s, cuts long generations that are not "
        "streamed); 0 = never",
    "listener.request_headers_timeout_s": "a client must send its request headers within "
        "this many seconds of the request's first byte, else 408 `request_timeout` (Envoy's "
        "`request_headers_timeout`: clients trickling headers to hold streams open); 0 = no "
        "limit",
    "listener.request_timeout_s": "a client must send its whole request within this many "
        "seconds, else 408 `request_timeout` (Envoy's `request_timeout`, disarmed once the "
        "request has passed the filters or a response starts: it never cuts an answer or a "
        "stream); 0 = no limit",
    "listener.auth": "client API keys, checked by Envoy's `api_key_auth` filter on every "
        "request (see [Security](#security)); off when unset",
    "listener.cors": "browser clients on other origins (CORS): Envoy answers their preflight "
        "`OPTIONS` itself, before the API key check, and marks every answer, errors included; "
        "off when unset (`OPTIONS` is then a 405)",
    "listener.cors.allow_origins": "origins allowed, exactly as browsers send them "
        "(`https://app.example.com`, with a port if not the default), or `*` for any",
    "listener.cors.max_age_s": "how long browsers may cache a preflight answer",
    "listener.auth.api_keys_file": "file of client keys: one per line, optionally "
        "`client:key`; blank lines and `#` comments skipped",
    "listener.auth.api_keys_env": "environment variable holding client keys, comma-separated, "
        "same entry format",
    # router: the ext_proc server
    "router.grpc": "the ext_proc gRPC address (also `grpc.health.v1`, and EDS with "
        "`endpoint_discovery: eds`)",
    "router.admin": "the admin HTTP address: `/health`, `/metrics`, `/v1/workers`",
    "router.auto_model_names": "model names that mean \"let the router choose\"",
    "router.failure_mode": "`closed`: Envoy answers 5xx when the router is unreachable; "
        "`open`: requests go on without it (auto names to the default model, explicit names "
        "to their model; a client-sent cluster header is never honoured)",
    "router.unknown_paths": "paths other than the OpenAI endpoints: `reject` (404 in OpenAI's "
        "error format) or `passthrough` (untouched, to the default model)",
    "router.passthrough_paths": "path prefixes always passed through untouched to the default "
        "model (e.g. `[/v1/embeddings]`)",
    "router.text_source": "what the classifiers read: the last user message; the last user "
        "message with the user messages before it when it is short (`recent_user`: earlier "
        "user messages until 32 characters, at most 8 messages, so 'why?' and an agent's 'yes' "
        "keep the conversation's topic; also for a last message of up to 240 characters that "
        "points back, 'can you make it handle empty files', unless it changes the subject); "
        "all user "
        "messages; or the whole conversation",
    "router.on_overload": "when the classifier queue is full: route to the default model and "
        "count it (`default`), or answer 429 (`reject`)",
    "router.message_timeout_ms": "Envoy's per-message ext_proc timeout; the classifiers give "
        "up sooner (`classifiers.batching.timeout_ms`, scans a fifth of this), so the rest "
        "absorbs queueing in an overloaded router instead of ending in a 504",
    "router.guard_explicit_models": "requests naming a model (not an auto name) still face "
        "the decisions with a `block` plugin, on only the signals those read; `false`: they go "
        "straight to their model",
    "router.mode": "`shadow`: decide, log and count, but change nothing (requests go to the "
        "default model)",
    "router.debug_header": "return per-signal results in `x-semantic-router-debug` when the "
        "client sends `x-semantic-router-debug: 1`",
    "router.end_streams_after_request": "end each ext_proc stream once the request is routed "
        "(the rendered filter skips the response phases); set `false` if your Envoy sends "
        "response headers to the router",
    "router.one_message_requests": "render routes that send OpenAI POSTs with a "
        "`content-length` to the router as one ext_proc message (the body, with the headers "
        "it reads as request attributes) and route them from its dynamic metadata; not used "
        "when a model has `api_key_env` or a decision `set_headers` (both need a headers phase)",
    "router.shutdown_grace_s": "on SIGTERM, health turns not-ready and in-flight streams get "
        "this long to finish",
    "router.endpoint_discovery": "`static`: clusters list the configured endpoints; `eds`: "
        "Envoy reads each model's ready endpoints (registered workers included) from the router",
    "router.health_check_path": "Envoy's active HTTP health check on every model cluster; "
        "`null` turns it off (e.g. for hosted APIs without `/health`)",
    "router.admin_token_env": "environment variable holding the admin token; when set, worker "
        "writes need `Authorization: Bearer <token>`",
    "router.state_dir": "where worker registrations are kept (`workers.json`); "
        "`serve --state-dir` overrides; unset: in memory only",
    "router.probe.interval_s": "readiness probe (`GET /v1/models` on every endpoint) period",
    "router.probe.timeout_s": "timeout of one readiness probe",
    "router.probe.max_backoff_s": "a failing endpoint's probe interval doubles up to this",
    "router.probe.startup_timeout_s": "how long start-up waits for the first probe round",
    "router.tls": "serve the gRPC and admin ports with TLS; `envoy render` then verifies the "
        "router; off when unset",
    "router.tls.cert_file": "PEM certificate chain of the router",
    "router.tls.key_file": "PEM private key of the router",
    "router.tls.ca_file": "CA bundle Envoy verifies the router against (unset: the system "
        "trust store)",
    "router.tls.server_name": "name Envoy verifies in the router's certificate (unset: the "
        "gRPC host; an IP is matched as an IP SAN)",
    # classifiers
    "classifiers.device": "where learned signals run; the environment variable "
        "`SEMANTIC_ROUTER_DEVICE` overrides it (e.g. `cpu` to leave the GPU to vLLM)",
    "classifiers.encoder": "shared encoder directory or hub id (unset: the bundled "
        "all-MiniLM-L6-v2)",
    "classifiers.encoder_adapter": "LoRA adapter merged into the encoder at start-up: "
        "`bundled` (the one the bundled heads were trained with; bundled encoder only), an "
        "adapter directory, or `null` for the plain encoder (heads must match it)",
    "classifiers.max_length": "tokens per classifier window",
    "classifiers.max_windows": "a longer text is split into at most this many windows",
    "classifiers.quantize_int8": "dynamic int8 linear layers on CPU (ignored on CUDA)",
    "classifiers.trace": "run classifier models (shared encoders, sequence and token models) "
    "as TorchScript traces checked against eager at start-up (no GIL during a forward pass): "
    "`cpu` (models on CPU), `always` (CUDA too) or `never`",
    "classifiers.long_prompts": "CPU only: prompts of at least `min_tokens` tokens are scored "
        "by a faster layer-reduced student encoder with the heads in each head directory's "
        "`long/` (unset: every prompt gets the full encoder)",
    "classifiers.long_prompts.min_tokens": "shortest text (in tokens) the student encoder scores",
    "classifiers.long_prompts.encoder_adapter": "`bundled` (the two-layer student the bundled "
        "`long/` heads were trained on) or a student directory",
    "classifiers.long_prompts.escalate_at": "a student jailbreak score at or above this sends "
        "the text to the full encoder, whose scores count (kept at or below the jailbreak "
        "signal's threshold, the student never blocks a request alone)",
    "classifiers.long_prompts.quantize_int8": "dynamic int8 linear layers for the student (its "
        "bundled heads were trained on int8 embeddings)",
    "classifiers.batching.max_batch_size": "most requests in one forward pass",
    "classifiers.batching.max_wait_ms": "how long a batch waits to fill, only while the queue "
        "is under load",
    "classifiers.batching.max_queue": "most waiting requests; beyond it `router.on_overload` "
        "applies",
    "classifiers.batching.timeout_ms": "longest a request waits for its classifier result "
        "(then the signal's `on_error` applies)",
    "classifiers.batching.workers": "worker threads of a CPU queue, sharing the process's torch "
        "threads: a lone request gets them all (one under 200 characters), under load each "
        "batch one share (`auto`: one per thread, at most 4); a GPU queue has one",
    # providers: the vLLM Semantic Router provider fragment's shape
    "providers": "the models the router can send requests to",
    "providers.defaults": "what a request no decision matches gets",
    "providers.defaults.model": "the default model (a `providers.models[].name`)",
    "providers.models": "the configured models; each becomes one Envoy cluster",
    "providers.models[].name": "public model name (also the cluster name, `/` becoming `_`)",
    "providers.models[].provider_model_id": "the id the backends serve (written into the "
        "request's `model`, checked against their `/v1/models`)",
    "providers.models[].api_format": "the backends' API; only OpenAI's",
    "providers.models[].backend_refs": "the endpoints serving this model",
    "providers.models[].pii_allowed": "PII entity types this model may receive (e.g. "
        "`[EMAIL_ADDRESS]`); requests carrying others get 403 `pii_not_allowed`; needs a "
        "`pii` signal; unset: no limit",
    f"{_BACKEND}.name": "endpoint name (in `/health`, `status` and metrics)",
    f"{_BACKEND}.endpoint": "the backend's address",
    f"{_BACKEND}.protocol": "scheme Envoy and the probes use to reach it",
    f"{_BACKEND}.provider": "serving runtime, informational (the provider fragment's field)",
    f"{_BACKEND}.weight": "load-balancing weight within the model's cluster",
    f"{_BACKEND}.api_key_env": "environment variable holding the backend's API key, sent "
        "upstream as `Authorization: Bearer <key>`; all refs of a model name the same one",
    # signals
    "signals": "what the router computes about a request; only signals some decision "
        "references are computed",
    "signals[].name": "the name decisions' rules refer to",
    "signals[].on_error": "when the signal fails or times out: not matched, matched, or "
        "refuse the request",
    "signals[].type": "the kind of signal; the rows below list each kind's own keys",
    "signals[type=keyword].keywords": "words or phrases to look for",
    "signals[type=keyword].text_source": _TEXT_SOURCE,
    f"{_LEARNED}.text_source": _TEXT_SOURCE,
    "signals[type=pii].text_source": _TEXT_SOURCE,
    "signals[type=language].text_source": _TEXT_SOURCE,
    "signals[type=keyword].regex": "keywords are regular expressions",
    "signals[type=keyword].case_sensitive": "match case exactly",
    "signals[type=keyword].word_boundary": "match whole words only (a keyword ending in a "
        "letter also matches its plural in -s or -es)",
    "signals[type=keyword].match": "matched when any keyword is found, or only when all are",
    "signals[type=keyword].read_obfuscated": "when the text has no match, also search it with "
        "leetspeak words read as letters (`m4k3 m3th`, `1gn0r3`), letters spelled one at a "
        "time joined (`i g n o r e`, `b.o.m.b`), and the payloads of base64, hex, binary, Morse "
        "or named ROT13 blobs and of strings assigned to variables (`a='how to'; b='make...'`) "
        "decoded and joined: for guard lists",
    "signals[type=context_length].min_tokens": "matched at or above this many estimated tokens",
    "signals[type=context_length].max_tokens": "matched at or below this many estimated tokens",
    f"{_LEARNED}.model": "classifier head directory (`domain`, `jailbreak`; unset: the bundled "
        "head; `bundled:<name>`: the head shipped in classifiers/models/<name>) or Hugging Face "
        "model directory or hub id (`sequence`, `token`)",
    f"{_LEARNED}.threshold": "lowest probability (or cosine, for `embedding`) that matches",
    f"{_LEARNED}.escalate_at": "`jailbreak` only: the long-prompt student's score at or above "
        "which a long prompt is scored again by the full encoder (unset: "
        "`classifiers.long_prompts.escalate_at`); a head whose student flags many harmless "
        "texts at that value escalates higher",
    f"{_LEARNED}.examples": "`embedding` only (and required there): example utterances per "
        "label",
    f"{_LEARNED}.fallback_keywords": "when the classifier fails or times out (a burst the CPU "
        "is behind on), the signal still matches if its text holds one of these phrases "
        "(whole words, any case), counted with outcome `fallback`; otherwise `on_error` "
        "applies. For a guard: the classic override phrases, so load cannot switch it off",
    f"{_LEARNED}.device": "where this signal's model runs, overriding `classifiers.device`",
    "signals[type=pii].entity_types": "the PII entity types wanted (e.g. `[CREDIT_CARD]`); "
        "unset: all of Presidio's (`NATIONAL_ID`, other countries' identity numbers, only "
        "when named)",
    "signals[type=pii].threshold": "lowest recognizer confidence that counts",
    "signals[type=language].languages": "ISO 639-1 codes to choose among (e.g. `[en, de, fr]`); "
        "unset: all 97 the model knows",
    "signals[type=language].threshold": "lowest probability of the detected language that "
        "matches",
    # decisions
    "decisions": "what to do about a request; the first enforcing decision whose rules hold "
        "wins",
    "decisions[].name": "decision name (no `/` or `:`): metrics label, response header and "
        "Envoy virtual cluster",
    "decisions[].priority": "higher first; equal priorities keep their order in the file",
    "decisions[].rules": "when the decision applies: exactly one of `signal`, `all`, `any`, "
        "`not`",
    "decisions[].rules.signal": "matched when this signal matched",
    "decisions[].rules.label": "with `signal`: only when the signal's label (or one of its "
        "labels) is this",
    "decisions[].rules.min_score": "with `signal`: only when the signal's score is at least "
        "this",
    "decisions[].rules.all": "every one of these rules holds (each takes the keys of `rules`)",
    "decisions[].rules.any": "at least one of these rules holds",
    "decisions[].rules.not": "this rule does not hold",
    "decisions[].model": "the model to route to (a `providers.models[].name`); required "
        "unless the decision blocks",
    "decisions[].mode": "`shadow`: compute, log and count the decision without applying it",
    "decisions[].plugins.block": "refuse the request; cannot be combined with other plugins",
    "decisions[].plugins.block.status": "HTTP status of the error",
    "decisions[].plugins.block.code": "the error's `code` in OpenAI's error format",
    "decisions[].plugins.block.message": "the error message, or the reply's text",
    "decisions[].plugins.block.respond": "`error`: an OpenAI-style error; `completion`: a 200 "
        "with `message` as the assistant's reply",
    "decisions[].plugins.system_prompt": "add a system prompt to the routed request",
    "decisions[].plugins.system_prompt.text": "the system prompt",
    "decisions[].plugins.system_prompt.mode": "`insert` ours first, keeping the client's, or "
        "`replace` the client's system messages",
    "decisions[].plugins.set_headers": "request headers added for the backend "
        "(`x-semantic-router-*` and hop-by-hop names are reserved)",
    # workers
    "workers": "static worker registrations: a list of worker documents (the "
        "[registration](#worker-registration) shape) or a directory of `*.json` files; "
        "read-only through the admin API",
}
