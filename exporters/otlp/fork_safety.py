"""gRPC's fork handlers off in a process that sends OTLP, unless the user chose otherwise.

gRPC's core installs ``pthread_atfork`` handlers that restart its threads in a forked
child. When the process forks while another thread is inside a gRPC call (the OTLP sink
exporting while a DataLoader forks its workers), gRPC skips its parent-side handler
("Other threads are currently calling into gRPC, skipping fork() handlers") but still
starts threads in the child over a poller caught mid-update, and the child can abort
(``ev_epoll1_linux.cc: Check failed: next_worker->state == KICKED``). The OTLP sink never
uses its channel in a forked child (its queue disables itself there), so the handlers buy
a trainer nothing and can kill its data-loader workers. gRPC reads
``GRPC_ENABLE_FORK_SUPPORT`` once, when it is first loaded: the OTLP sink sets it to
``false`` before loading gRPC, unless the variable is already set (the user's choice wins)
or gRPC is already loaded (too late: one warning says how to set it).
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["ENV", "keep_forked_children_safe"]

ENV = "GRPC_ENABLE_FORK_SUPPORT"
logger = logging.getLogger(__name__)
_warned = False


def keep_forked_children_safe() -> bool:
    """Turn gRPC's fork handlers off if gRPC is not loaded yet and ``ENV`` is unset.

    Returns True when the handlers are off for this process (set here or by the user).
    """
    global _warned
    chosen = os.environ.get(ENV)
    if chosen is not None:
        return chosen.strip().lower() in ("0", "false", "no", "off")
    if "grpc" in sys.modules:
        if not _warned:
            _warned = True
            logger.warning(
                "otlp: gRPC was loaded before the OTLP sink with its fork handlers on: a "
                "child forked while the sink exports (a DataLoader worker) may abort; set "
                "%s=false before anything imports grpc (docs/troubleshooting.md)",
                ENV,
            )
        return False
    os.environ[ENV] = "false"
    return True
