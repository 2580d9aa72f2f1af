"""One remote-write HTTP request: snappy-compressed protobuf POSTed with the spec's headers.

Answers (:class:`~exporters.base.ExportResult`): 2xx SUCCESS; 429, 5xx and connection
errors or timeouts FAILURE (retryable); any other status PERMANENT_FAILURE (the receiver
refused this data and will refuse it again).
"""

from __future__ import annotations

import urllib.error
import urllib.request

import cramjam

from exporters.base import ExportResult

HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
    "User-Agent": "rltel-collector",
}


def compress(payload: bytes) -> bytes:
    """Snappy block format (not framed), as remote write requires."""
    return bytes(cramjam.snappy.compress_raw(payload))


def decompress(body: bytes) -> bytes:
    """The inverse of :func:`compress` (tests and receivers)."""
    return bytes(cramjam.snappy.decompress_raw(body))


def post(url: str, payload: bytes, timeout_s: float) -> tuple[ExportResult, str]:
    """POST one serialized WriteRequest; ``(result, detail for the log)``, never raises."""
    request = urllib.request.Request(url, data=compress(payload), headers=HEADERS, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read()
            return ExportResult.SUCCESS, str(response.status)
    except urllib.error.HTTPError as exc:
        body = exc.read(512).decode("utf-8", "replace").strip()
        retry = exc.code == 429 or exc.code >= 500
        result = ExportResult.FAILURE if retry else ExportResult.PERMANENT_FAILURE
        return result, f"HTTP {exc.code}: {body}"
    except OSError as exc:  # URLError, connection refused or reset, timeouts
        return ExportResult.FAILURE, f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
