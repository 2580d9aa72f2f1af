"""How the Prometheus endpoint is served: HTTP or HTTPS, with or without a bearer token.

HTTPS wraps each accepted connection in that request's own thread, so a slow or broken TLS
client holds its thread, never the accept loop; a failed handshake is logged at debug level.
A request without the token (:mod:`exporters.bearer`'s rule) is answered 401 with
``WWW-Authenticate: Bearer`` and logged (rate-limited per client); nothing else is read
from it.
"""

from __future__ import annotations

import logging
import socket
import ssl
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from exporters.bearer import BearerCheck

logger = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 10.0  # a connection that does not finish its handshake is dropped


class TlsHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server whose connections speak TLS with ``context``."""

    def __init__(self, address: tuple[str, int], handler: type, context: ssl.SSLContext) -> None:
        self.context = context
        super().__init__(address, handler)

    def finish_request(self, request: socket.socket, client_address: tuple) -> None:
        request.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            connection = self.context.wrap_socket(request, server_side=True)
        except OSError as exc:  # ssl.SSLError included: a plaintext or failed client
            logger.debug("prometheus https: handshake with %s failed: %s", client_address, exc)
            return
        try:
            super().finish_request(connection, client_address)
        finally:
            connection.close()


def http_server(
    address: tuple[str, int], handler: type, cert_file: str | None, key_file: str | None
) -> ThreadingHTTPServer:
    """A bound server for ``handler``: HTTPS with ``cert_file``/``key_file``, else HTTP.

    Raises:
        OSError: the address cannot be bound, or the files cannot be loaded.
    """
    if cert_file is None:
        return ThreadingHTTPServer(address, handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file, b"")
    return TlsHTTPServer(address, handler, context)


class TokenDoor:
    """The endpoint's bearer-token check (:class:`exporters.bearer.BearerCheck`); a refused
    request is answered 401 and logged with the client's address and the reason, at once for a
    client's first and then at most once a minute per client.

    Args:
        token: the token a request must send; None: every request passes.
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(self, token: str | None, clock: Callable[[], float] = time.monotonic) -> None:
        what = "prometheus endpoint: refused an unauthenticated request"
        self._check = None if token is None else BearerCheck(token, logger, what, clock=clock)

    def admits(self, request: BaseHTTPRequestHandler) -> bool:
        """True when ``request`` may pass; else answers it 401 and returns False."""
        check = self._check
        if check is None or check.allowed(
            request.headers.get("Authorization"), request.client_address[0]
        ):
            return True
        body = b"a bearer token is required (Authorization: Bearer <token>)\n"
        request.send_response(401)
        request.send_header("WWW-Authenticate", 'Bearer realm="rltel"')
        request.send_header("Content-Type", "text/plain; charset=utf-8")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
        return False
