"""Whether an endpoint speaks TLS, asked of the endpoint itself.

A plaintext gRPC channel fails with ``Socket closed`` both when the port speaks TLS and when
a plaintext server dies under it (killed, restarted). Only the server's answer tells them
apart: :func:`speaks_tls` opens its own TCP connection, sends a TLS ClientHello and reads the
first bytes back. A TLS server answers with a TLS record (a handshake or an alert); a
plaintext gRPC server answers HTTP/2 frames or closes; a dead one refuses the connection.
"""

from __future__ import annotations

import contextlib
import socket
import ssl

PROBE_TIMEOUT_S = 2.0
TLS_RECORD_TYPES = (0x15, 0x16)  # alert, handshake: what a TLS server answers a ClientHello
TLS_MAJOR_VERSION = 0x03


def host_port(target: str) -> tuple[str, int] | None:
    """``host:port`` or ``[v6]:port`` -> ``(host, port)``; None when it names no port."""
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def client_hello(server_name: str) -> bytes:
    """The bytes of a TLS ClientHello for ``server_name``, made by Python's ssl module."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name or None)
    with contextlib.suppress(ssl.SSLWantReadError):  # the hello is written; it waits
        tls.do_handshake()
    return outgoing.read()


def speaks_tls(target: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """True when ``target`` answers a TLS ClientHello with a TLS record.

    False when it refuses the connection, closes it, answers other bytes or nothing within
    ``timeout_s``: no evidence of TLS.
    """
    address = host_port(target)
    if address is None:
        return False
    try:
        with socket.create_connection(address, timeout=timeout_s) as sock:
            sock.sendall(client_hello(address[0]))
            head = sock.recv(2)
    except OSError:
        return False
    return len(head) == 2 and head[0] in TLS_RECORD_TYPES and head[1] == TLS_MAJOR_VERSION
