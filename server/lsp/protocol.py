"""JSON-RPC robustness on top of pygls: malformed input is answered or ignored, never a popup.

pygls 2.1.1 structures each message inside `json.loads`; when a request's params do not fit
its type (a position given as a string, a line past 2**31) the error escapes to the read loop,
which logs it and never answers: the client waits for that id forever. And every message the
loop cannot handle (bad JSON, an array, no `jsonrpc`) becomes a "Error in server" popup in the
user's editor. Here a request with bad params is answered with InvalidParams (its id kept),
a notification with bad params is dropped, and read-loop errors only go to the log.
pygls also drops requests that arrive after `shutdown` without a word (LSP wants them
answered with InvalidRequest), and a didChange of a document that is not open raised a
KeyError shown as a popup (it is ignored).

pygls also files the future of every handler it runs under the message's id in
`_request_futures` and removes it only when a *request* is answered: a notification with a
generator handler (didOpen, didChange, didClose, initialized: pygls' own handlers yield to
ours) or a coroutine handler got a fresh uuid and its finished future stayed forever, ~2 KB
per keystroke (+70 MB in a 10-minute editing soak). Here a finished handler's entry goes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote

from lsprotocol import types
from lsprotocol.types import EXIT
from pygls.exceptions import JsonRpcException, JsonRpcInvalidRequest
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCNotification, RPCMessage, RPCRequest
from pygls.protocol.language_server import lsp_method

log = logging.getLogger("stridelens.lsp")

# Notifications under `$/` may be ignored by a server: the rejected message becomes one.
IGNORED = "$/stridelens/ignored"


class StridelensProtocol(LanguageServerProtocol):
    def structure_message(self, data: Any) -> Any:
        if "jsonrpc" in data and "method" in data and "id" in data and not _usable_id(data["id"]):
            return self._reject(data, JsonRpcInvalidRequest("the id must be a number or a string"))
        try:
            return super().structure_message(data)
        except JsonRpcException as err:
            return self._reject(data, err)

    def handle_message(self, message: RPCMessage) -> None:
        if self._shutdown and isinstance(message, RPCRequest) and message.method != EXIT:
            error = JsonRpcInvalidRequest("the server is shutting down")
            self._send_response(message.id, None, error.to_response_error())
            return
        super().handle_message(message)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> Iterator[Any]:
        if unquote(params.text_document.uri) not in self.workspace.text_documents:
            log.warning("didChange of %s, which is not open: ignored", params.text_document.uri)
            return
        yield from super().lsp_text_document__did_change(params)

    def _execute_handler(
        self,
        msg_id: Any,
        handler: Any,
        callback: Callable[[Any], None],
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        def done(future: Any) -> None:  # a concurrent or an asyncio future
            # A cancelled future is either already removed ($/cancelRequest) or being
            # cancelled by `shutdown` while it iterates over the dict: left alone.
            if not future.cancelled() and self._request_futures.get(msg_id) is future:
                del self._request_futures[msg_id]
            callback(future)

        super()._execute_handler(msg_id, handler, done, args, kwargs)

    def _reject(self, data: dict[str, Any], err: JsonRpcException) -> JsonRPCNotification:
        method = data.get("method")
        if isinstance(method, str) and "id" in data:
            msg_id = data["id"] if _usable_id(data["id"]) else None
            if msg_id is None:  # JSON-RPC wants `"id": null`; pygls would leave the id out
                error = err.to_response_error()
                self._send_data({"jsonrpc": "2.0", "id": None,
                                 "error": {"code": error.code, "message": error.message}})
            else:
                self._send_response(msg_id, None, err.to_response_error())
            log.warning("request %r (%s) rejected: %s", msg_id, method, err)
        else:
            log.warning("message dropped (%s): %s", method, err)
        return JsonRPCNotification(method=IGNORED, jsonrpc="2.0", params=None)


def _usable_id(msg_id: Any) -> bool:
    return isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool)
