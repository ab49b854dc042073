"""``semantic-router``: serve, config validate, envoy render, status, demo, train."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from extproc.cli_policy import InputError
from extproc.cli_policy import add_commands as add_policy_commands
from extproc.config import ConfigError, RouterConfig, load_config
from extproc.names import DEFAULT_ADMIN_HTTP, DEFAULT_ENVOY_ADMIN

_BUNDLED = Path(__file__).parent / "_bundled" / "config" / "default.yaml"
_SOURCE_TREE = Path(__file__).parent.parent / "config" / "default.yaml"


def default_config_path() -> Path:
    """The embedded defaults: the source tree's file, else the copy inside the wheel."""
    return _SOURCE_TREE if _SOURCE_TREE.exists() else _BUNDLED


def _load(path: str | None) -> RouterConfig:
    return load_config(path or default_config_path())


def _add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", help="router config YAML (default: embedded defaults)")


def _cmd_validate(args: argparse.Namespace) -> int:
    config = _load(args.config)
    try:  # the variables serve will read: said here, as warnings (CI may validate without)
        from extproc.security import backend_auth

        backend_auth(config)
    except ConfigError as err:
        for problem in err.errors:
            print(f"warning: {problem} (`serve` refuses to start without it)", file=sys.stderr)
    if args.probe:
        from extproc.status import probe_config

        problems, probed = asyncio.run(probe_config(config, args.timeout))
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        if problems:
            return 1
        print(f"ok: probed {probed} endpoint(s); every one serves its provider model id")
    print(f"ok: {args.config or default_config_path()}: {config.summary()}")
    return 0


def _cmd_reference(args: argparse.Namespace) -> int:
    from extproc.config.reference import render_markdown

    sys.stdout.write(render_markdown())
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    import json

    from extproc.status import fetch_health, format_health, format_traffic, read_traffic

    config = _load(args.config) if args.config else None
    admin = args.admin or f"http://{config.router.admin if config else DEFAULT_ADMIN_HTTP}"
    envoy_admin = args.envoy_admin or (
        f"http://{config.listener.admin if config else DEFAULT_ENVOY_ADMIN}")
    try:
        status, body = fetch_health(admin, args.timeout)
    except (OSError, ValueError) as err:
        print(f"error: cannot read {admin}/health: {err}", file=sys.stderr)
        return 2
    # Envoy's stats are extra: unreachable Envoy is reported, never changes the exit code.
    traffic = read_traffic(body, envoy_admin, args.timeout)
    if args.json:
        envoy = ({"available": False, "error": traffic} if isinstance(traffic, str)
                 else {"available": True, **traffic.to_json()})
        print(json.dumps({**body, "envoy": {"admin": envoy_admin, **envoy}}, indent=2))
    else:
        decisions = [d.name for d in config.decisions] if config else []
        print(format_health(body) + "\n\n" + format_traffic(body, traffic, decisions))
    return 0 if status == 200 else 1


def _cmd_render(args: argparse.Namespace) -> int:
    from extproc.envoy_render import bootstrap, fragment, to_yaml
    from extproc.security import envoy_secret_paths

    config = _load(args.config)
    secret_paths = envoy_secret_paths(config)
    if secret_paths and not args.include_secrets:
        print(f"error: the rendered Envoy config would hold secrets in clear (from "
              f"{', '.join(secret_paths)}); pass --include-secrets to print them, and write "
              "the output to a file only Envoy's user can read (or use serve --with-envoy)",
              file=sys.stderr)
        return 2
    render = fragment if args.fragment else bootstrap
    document = render(config, args.grpc_address)
    sys.stdout.write(to_yaml(document))
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from extproc.envoy_process import EnvoyError
    from extproc.logs import configure_logging
    from extproc.server import StartupError, serve

    configure_logging(args.log_format, args.log_level)
    config = _load(args.config)

    async def main() -> None:
        stop, reload = asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, reload.set)  # re-read the config file now
        # hot reload watches the file it was started with (not the embedded defaults)
        path = Path(args.config) if args.config else None
        await serve(config, with_envoy=args.with_envoy, stop=stop, config_path=path,
                    reload=reload, state_dir=args.state_dir or None)

    try:
        asyncio.run(main())
    except (StartupError, EnvoyError) as err:
        logging.shutdown()  # the log writer thread's last lines first, then ours, whole
        sys.stderr.write(f"error: {err}\n")
        return 1
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from extproc.demo import run_demo

    return asyncio.run(run_demo(_load(args.config), verbose=args.verbose))


def _train(argv: list[str]) -> int:
    # Parsed on its own so that other commands never import torch (classifiers.training).
    from classifiers.training import add_arguments, run

    parser = argparse.ArgumentParser(
        prog="semantic-router train", description="train a classifier head from labelled JSONL"
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="semantic-router", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the ext_proc router")
    _add_config(serve)
    serve.add_argument("--with-envoy", action="store_true",
                       help="also run the bundled Envoy with the rendered config")
    serve.add_argument("--log-format", choices=["json", "text"], default="json")
    serve.add_argument("--log-level", default="info")
    serve.add_argument("--state-dir", help="where worker registrations are kept "
                       "(overrides router.state_dir)")
    serve.set_defaults(func=_cmd_serve)

    config = commands.add_parser("config", help="config tools")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    validate = config_commands.add_parser("validate", help="check a config file")
    _add_config(validate)
    validate.add_argument("--probe", action="store_true", help="also check each provider model "
                          "id against the live /v1/models of its endpoints")
    validate.add_argument("--timeout", type=float, default=3.0, help="probe timeout (s)")
    validate.set_defaults(func=_cmd_validate)
    reference = config_commands.add_parser("reference", help="print every config key as the "
                                           "README's Markdown table")
    reference.set_defaults(func=_cmd_reference)

    status = commands.add_parser("status", help="the router's /health and Envoy's traffic "
                                 "as tables")
    _add_config(status)
    status.add_argument("--admin", help="router admin URL (default: from --config, else "
                        f"http://{DEFAULT_ADMIN_HTTP})")
    status.add_argument("--envoy-admin", help="Envoy admin URL for traffic stats (default: "
                        f"listener.admin from --config, else http://{DEFAULT_ENVOY_ADMIN})")
    status.add_argument("--json", action="store_true",
                        help="print the /health JSON, Envoy's numbers under \"envoy\"")
    status.add_argument("--timeout", type=float, default=5.0)
    status.set_defaults(func=_cmd_status)

    envoy = commands.add_parser("envoy", help="Envoy tools")
    envoy_commands = envoy.add_subparsers(dest="envoy_command", required=True)
    render = envoy_commands.add_parser("render", help="print Envoy v3 config")
    _add_config(render)
    render.add_argument("--fragment", action="store_true",
                        help="only the filters, clusters and route an existing Envoy needs")
    render.add_argument("--grpc-address", help="where Envoy reaches the router (host:port)")
    render.add_argument("--include-secrets", action="store_true",
                        help="print client API keys (listener.auth) and, with fail-open, "
                        "backend keys in clear; refused without this flag")
    render.set_defaults(func=_cmd_render)

    demo = commands.add_parser("demo", help="simulated backends + router + Envoy + samples")
    _add_config(demo)
    demo.add_argument("--verbose", action="store_true", help="show router and Envoy logs")
    demo.set_defaults(func=_cmd_demo)

    # Listed for --help only: main() hands "train" to _train before this parser runs.
    add_policy_commands(commands, _load)
    commands.add_parser("train", help="train a classifier head from labelled JSONL")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["train"]:
        return _train(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        result: int = args.func(args)
        sys.stdout.flush()  # here, so that a closed pipe is handled below, not at exit
    except (ConfigError, InputError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `semantic-router status | head`: the reader left; say nothing more, as `cat` does.
        # Python would flush stdout again at exit and fail there: point it at /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + signal.SIGPIPE
    return result


if __name__ == "__main__":
    sys.exit(main())
