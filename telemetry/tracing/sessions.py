"""AReaL's session tracer: each rollout session's lifecycle, to ``sessions.jsonl`` and as spans.

A session is registered under a task (:meth:`SessionTracer.register_session`), goes through
phases (``generate``, ``reward``, ``toolcall``: each may run several times) and is finalized
with a status (``accepted``, ``rejected``, ``failed``, ``dropped``). Finished sessions are
appended to the sessions file in AReaL's record format (``task_id``, ``session_id``,
``rank``, ``role``, ``status``, ``reason``, ``submit_ts``, ``finalized_ts``, ``total_s``,
``generate_s``, ``reward_s``, ``toolcall_s``, ``phases``, ``counters``) once
``flush_threshold`` of them are ready, or all at a forced flush. Besides the file, each
session is a span ``session`` (category ``session``, from registration to finalization) and
each finished phase a child span ``session.<phase>``, so the collector sees rollout phase
latencies. A failing write drops those records, counted and logged once per change.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from telemetry.model import trace_names
from telemetry.tracing.categories import SessionTraceEvent

if TYPE_CHECKING:
    from telemetry.tracing.recorder import Identity, Recorder

__all__ = ["PHASES", "SessionTracer"]

logger = logging.getLogger(__name__)

PHASES = ("generate", "reward", "toolcall")
"""The phases AReaL's session tracer keeps (other phase names are ignored, as in AReaL)."""

_TERMINAL = frozenset({"rejected", "failed", "dropped"})


@dataclass
class _Session:
    task_id: int
    session_id: int
    submit_ns: int
    identity: Identity
    status: str = "pending"
    reason: str | None = None
    finalized_ns: int | None = None
    phases: dict[str, list[list[int | None]]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)

    def ready(self) -> bool:
        return self.status in _TERMINAL or (
            self.status == "accepted" and self.finalized_ns is not None
        )

    def record(self, rank: int, role: str | None) -> dict[str, Any]:
        """AReaL's JSON record of this session (``None`` fields left out)."""

        def seconds(ns: int | None) -> float | None:
            return None if ns is None else ns / 1e9

        def total(phase: str) -> float | None:
            done = [end - start for start, end in self.phases.get(phase, ()) if end is not None]
            return sum(done) / 1e9 if done else None

        finalized = seconds(self.finalized_ns)
        fields: dict[str, Any] = {
            "task_id": self.task_id,
            "session_id": self.session_id,
            "rank": rank,
            "role": role,
            "status": self.status,
            "reason": self.reason,
            "submit_ts": seconds(self.submit_ns),
            "finalized_ts": finalized,
            "total_s": None if finalized is None else (self.finalized_ns - self.submit_ns) / 1e9,
            **{f"{phase}_s": total(phase) for phase in PHASES},
        }
        out = {key: value for key, value in fields.items() if value is not None}
        phases = {
            name: [{"start_ts": seconds(s), "end_ts": seconds(e)} for s, e in spans]
            for name, spans in self.phases.items()
            if spans
        }
        if phases:
            out["phases"] = phases
        counters = {name: value for name, value in self.counters.items() if value}
        if counters:
            out["counters"] = counters
        return out


class SessionTracer:
    """Per-session lifecycle records and spans for one process (see the module doc).

    Args:
        path: the sessions file.
        flush_threshold: finished sessions written together.
        rank: written in each record.
        role: written in each record when given.
        recorder: where the session and phase spans go.
    """

    def __init__(
        self, path: Path, *, flush_threshold: int, rank: int, role: str | None, recorder: Recorder
    ) -> None:
        self.path = Path(path)
        self._threshold = max(flush_threshold, 1)
        self._rank = rank
        self._role = role
        self._recorder = recorder
        self._lock = threading.Lock()
        self._next_id = 0
        self._tasks: dict[int, set[int]] = {}
        self._sessions: dict[int, _Session] = {}
        self._ready: set[int] = set()
        self.failed_records = 0
        self._failing = False

    def register_task(self, task_id: int) -> None:
        """Start grouping sessions under ``task_id``."""
        with self._lock:
            self._tasks.setdefault(task_id, set())

    def register_session(self, task_id: int) -> int:
        """A new session of ``task_id``; returns its id (0, 1, ... in this process)."""
        now = time.time_ns()
        with self._lock:
            session_id = self._next_id
            self._next_id += 1
            identity = self._recorder.open(None)
            self._sessions[session_id] = _Session(task_id, session_id, now, identity)
            self._tasks.setdefault(task_id, set()).add(session_id)
        return session_id

    def get_session_ids(self, task_id: int) -> list[int]:
        """The sessions registered under ``task_id``."""
        with self._lock:
            return sorted(self._tasks.get(task_id, ()))

    def record_event(self, session_id: int, event: SessionTraceEvent, **payload: Any) -> None:
        """Apply ``event`` to the session (unknown sessions are ignored)."""
        now = time.time_ns()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return
            if event is SessionTraceEvent.FINALIZED:
                session.finalized_ns = now
                session.status = payload.get("status", session.status)
                if "reason" in payload:
                    session.reason = payload["reason"]
            else:
                phase, _, edge = event.value.rpartition("_")
                self._phase(session, phase, edge == "start", now)
            if session.ready() or event is SessionTraceEvent.FINALIZED:
                self._ready.add(session_id)
            due = len(self._ready) >= self._threshold
        if due:
            self.flush()

    def _phase(self, session: _Session, phase: str, start: bool, now: int) -> None:
        spans = session.phases.setdefault(phase, [])
        open_span = spans[-1] if spans and spans[-1][1] is None else None
        if start:
            spans.append([now, None])
            return
        if open_span is None:
            open_span = [now, None]
            spans.append(open_span)
        open_span[1] = now
        args = {"session_id": session.session_id, "task_id": session.task_id}
        me = self._recorder.open(session.identity)
        category = trace_names.SESSION_CATEGORY
        self._recorder.span(
            f"session.{phase}", category, args, open_span[0], now, me, session.identity
        )

    def increment_counter(self, session_id: int, name: str, value: int = 1) -> None:
        """Add ``value`` to the session's counter ``name``."""
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None:
                session.counters[name] = session.counters.get(name, 0) + value
                if session.ready():
                    self._ready.add(session_id)

    def flush(self, force: bool = False) -> None:
        """Write the finished sessions (every session when ``force``) and end their spans."""
        with self._lock:
            if force:
                ids = list(self._sessions)
            else:  # as AReaL: a session finalized without a final status waits
                self._ready.intersection_update(self._sessions)
                ids = sorted(i for i in self._ready if self._sessions[i].ready())
            taken = [self._sessions.pop(i) for i in ids]
            self._ready.difference_update(ids)
        if not taken:
            return
        for session in taken:
            args = {"session_id": session.session_id, "task_id": session.task_id}
            args["status"] = session.status
            if session.reason is not None:
                args["reason"] = session.reason
            end = session.finalized_ns or time.time_ns()
            category = trace_names.SESSION_CATEGORY
            self._recorder.span("session", category, args, session.submit_ns, end, session.identity)
        lines = "".join(
            json.dumps(s.record(self._rank, self._role), ensure_ascii=False, default=str) + "\n"
            for s in taken
        )
        self._write(lines, len(taken))

    def _write(self, lines: str, count: int) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as out:
                out.write(lines)
        except OSError as exc:
            self.failed_records += count
            if not self._failing:
                self._failing = True
                logger.warning(
                    "perf_tracer: cannot write %s (%s); sessions dropped", self.path, exc
                )
            return
        if self._failing:
            self._failing = False
            logger.warning(
                "perf_tracer: writing %s again (%d sessions dropped)",
                self.path,
                self.failed_records,
            )
