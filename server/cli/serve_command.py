"""`stridelens serve [--stdio | --tcp HOST:PORT]`: the language server.

stdio is the default. TCP listens on loopback addresses only, unless `--allow-remote` is
given; the address is checked before any socket exists.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from typing import Any

from stridelens.i18n import tr
from stridelens.server.analysis import collector


class AddressError(ValueError):
    pass


def register(commands: Any) -> None:
    sub = commands.add_parser(
        "serve",
        help=tr("run the language server (stdio by default)"),
        description=tr("Run the stridelens language server: hover cards, inlay hints, diagnostics "
        "and quick fixes in any LSP editor."),
    )
    mode = sub.add_mutually_exclusive_group()
    mode.add_argument("--stdio", action="store_true", help=tr("talk LSP over stdin/stdout (default)"))
    mode.add_argument("--tcp", metavar="HOST:PORT", help=tr("listen on HOST:PORT (loopback only by default)"))
    sub.add_argument(
        "--allow-remote",
        action="store_true",
        help=tr("allow --tcp on a non-loopback address (anyone who can reach it can read your code)"),
    )
    sub.add_argument("--log-file", metavar="PATH", help=tr("write the server's log to PATH"))
    sub.add_argument(
        "--log-messages",
        action="store_true",
        help=tr("with --log-file: also log every LSP message, in full (large: a publish can be 100 KB)"),
    )
    sub.set_defaults(handler=run)


def parse_address(spec: str, allow_remote: bool = False) -> tuple[str, int]:
    """`127.0.0.1:2087`, `localhost:2087`, `[::1]:2087` -> (host, port)."""
    if spec.startswith("["):
        host, sep, port_text = spec[1:].partition("]:")
        if not sep:
            raise AddressError(tr("{spec}: expected [IPV6]:PORT").format(spec=spec))
    else:
        host, sep, port_text = spec.rpartition(":")
        if not sep or not host:
            raise AddressError(tr("{spec}: expected HOST:PORT").format(spec=spec))
    try:
        port = int(port_text)
    except ValueError:
        raise AddressError(tr("{spec}: PORT must be a number").format(spec=spec)) from None
    if not 1 <= port <= 65535:
        raise AddressError(tr("{spec}: PORT must be between 1 and 65535").format(spec=spec))
    if host == "localhost":
        return host, port
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if allow_remote:
            return host, port
        raise AddressError(
            tr(
                "{spec}: {host!r} is not a loopback address; use 127.0.0.1, ::1 or localhost "
                "(or --allow-remote)"
            ).format(spec=spec, host=host)
        ) from None
    if not address.is_loopback and not allow_remote:
        raise AddressError(
            tr(
                "{spec}: {host} is not a loopback address; refusing to expose the server "
                "(pass --allow-remote to do it anyway)"
            ).format(spec=spec, host=host)
        )
    return host, port


def run(args: argparse.Namespace) -> int:
    if args.log_messages and not args.log_file:
        print(tr("stridelens serve: --log-messages needs --log-file PATH"), file=sys.stderr)
        return 2
    if args.tcp:
        try:
            host, port = parse_address(args.tcp, args.allow_remote)
        except AddressError as err:
            print(tr("stridelens serve: {error}").format(error=err), file=sys.stderr)
            return 2
        with collector.paused():  # the server's imports leave no garbage to look for
            from stridelens.server.lsp.server import serve_tcp

        return serve_tcp(host, port, args.log_file, args.log_messages)
    with collector.paused():
        from stridelens.server.lsp.server import serve_stdio

    return serve_stdio(args.log_file, args.log_messages)
