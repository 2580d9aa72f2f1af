"""Score a cosmic-ray session: killed mutants over the non-equivalent ones, and the rest.

Usage: python scripts/mutation_report.py SESSION.sqlite [SOURCE_ROOT]
       python scripts/mutation_report.py --skip-annotations SESSION.sqlite [SOURCE_ROOT]
       python scripts/mutation_report.py --reuse-killed OLD.sqlite OLD_ROOT SESSION.sqlite ROOT

The second form, run between ``cosmic-ray init`` and ``exec``, marks the mutants inside
annotations as skipped, so their tests never run (they are equivalent, below). The third
copies the killed results of an earlier session of the same module into a new one, so
that ``exec`` runs only the earlier survivors (and any new mutant): only where the module's
text is unchanged, and sound only where tests were added, not changed or removed, since.

Two kinds of mutants are counted as equivalent, mechanically:

* inside type annotations: every module here starts with ``from __future__ import
  annotations``, so annotations are never evaluated;
* ``==`` turned into ``is`` (``!=`` into ``is not``) against a string or small-integer
  literal: CPython interns both, and the compared values here come from literals too;
* ``slots=True`` turned into ``slots=False`` in a ``@dataclass(...)`` decorator: slots
  only forbid attributes the class does not declare (and drop ``__dict__``); a program
  that runs with them runs the same without them. (It assumes no code relies on the
  ``AttributeError`` of an undeclared attribute; ruff and mypy reject such assignments.)

A mutant some test killed is counted as killed even where a rule above would call it
equivalent. Survivors judged equivalent by hand are listed in ``JUDGED`` below (module,
the line the mutant writes, why): matched by their text, not their line number, so the
list survives edits elsewhere in the module; a judged mutant whose line changed shows up
as a survivor again, to be judged anew. Every other survivor is listed with its line, to
be killed by a test or judged by hand.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) positions of every annotation in ``source``."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        annotations = []
        if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            annotations.append(node.annotation)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns:
            annotations.append(node.returns)
        for ann in annotations:
            spans.append(((ann.lineno, ann.col_offset), (ann.end_lineno, ann.end_col_offset)))
    return spans


_ORDERED_KINDS = (
    "the kinds are four strings; the branches before took every kind the mutated"
    " comparison adds, so it selects the same kind"
)
_UNREAD = "the extra entries it stores for other kinds are never read (memory only)"
_SEQ = "sequence numbers only order the entries: another start or gaps keep the order"
_ONE_DEVICE = "one device through the several-devices branch: the same vector"
_RELEASE_ZERO = "left is never negative, and releasing 0 slots changes nothing"
_CHUNKS = "chunks change no number: every state pools exactly (test_chunked_processing)"
_ROWS = "another row layout of the same tokens: the pooled states are the same"
_NO_EMPTY = (
    "rows and tokens are >= 1 here: every caller of row_chunks refuses an input without"
    " tokens first (as_mask, since 3d45a04)"
)
_BOOL_MUL = "on bool tensors * is a logical and: the same counts"
_FOUR = "the states are 4 long: [2:5] is [2:4]"
_EQUAL_EXTREME = "an equal value is the same extreme (up to the sign of a zero)"
_SAME_ROW = "every empty row holds the same values"
_JOIN_NEGATIVE = "Thread.join of a negative timeout waits 0 s (it clamps at 0)"
_ENUM_IDENTITY = "enum members are singletons: == is is, != is is not"
_MOD_CLOCK = (
    "a % b is a - b for b <= a < 2b: the later reading of the monotonic clock is less than"
    " twice the earlier (a wait or failure shorter than the machine's uptime)"
)
_SPILL_NOTHING = "spilling an empty queue (nothing held) moves nothing"
_DOWN_FIRST = (
    "of the link's three states (down, ok, refusing) none sorts below down: <= DOWN is == DOWN"
)
_CLOCK_EQUAL = "two monotonic readings a whole backoff or spill_after_s apart never tie"
_BIGGER_BUFFER = (
    "more rows of comparison scratch than the minima need (memory only): every row the"
    " minima and comparisons use is still there"
)
_DTYPE_IDENTITY = "torch dtypes are singletons: != is is not"
_NO_MINUS_INF_LOGP = (
    "the marked log-probs are finite (non-finite inputs are unmarked: NaN here), so there"
    " is no -inf for neginf to replace"
)
_SPENT_ROW = "either row of the spent log-prob buffer (both read already) holds the copy of d"
_ONE_DIM = "the tensor is 1-D: dim -1 is dim 0"
_MIN_ROWS = "_MIN_ABOVE_ROWS = {dtype: N_EXTREME_ROWS %s for dtype in _BITS}"
_ONE_CALL = "the tensors of one call share one dtype and length: any of them gives the same"
_DISJOINT_FLAGS = "the flags are distinct single bits: + and ^ give the same value as |"
_BOOT_CLOCK = (
    "the monotonic clock counts from the machine's boot: the first idle checkpoint is due"
    " either way, unless the machine booted within a second of interval_s before it"
)
_TAKEN_UP = (
    "take_up sets it before gone reads it: a KeptBacklog whose take_up failed is never used"
    " again (the sink keeps nothing then)"
)
_LAST_FAILED = (
    "a failed record at the data's end is stepped over and counted corrupt, or ends the"
    " reading as a torn tail, counted once: the same count and the same records"
)
_STATES = (
    "the link state only ever holds the module's constants OK, DOWN and REFUSING (the same"
    " string objects): is is ==, is not is !="
)
_NOT_PAST_END = "a record read never ends past the data: < is !="
_NLINK = "a link count is never negative: <= 0 is == 0"
_CRC_CATCHES = (
    "each mutant is never above start + size, so it only misses a payload cut short; that"
    " payload then fails its CRC, which ends the scan as a torn tail, counted once: the same"
    " records and count"
)
_FIRST_SEGMENT = (
    "the first append opens a segment (there is no fd before it), which sets it to 0 before"
    " it is read"
)
_FEW_SEGMENTS = (
    "segment indexes are ints below 257 (CPython caches them: is is ==) while a journal"
    " holds at most 257 segments of 4 MiB"
)
_SEQ_FROM_ZERO = "sequence numbers start at 0: a seq of -2 skips the same records (none) as -1"
_STATE_BEFORE_COMPACT = (
    "max(COMPACT_BYTES, 2 * a state of -1, 0 or 1 bytes) is COMPACT_BYTES (1 MiB); __init__"
    " compacts before the first record, setting it"
)
_ODD_HALF = (
    "len(part) // 2 for every part length (an odd part's first half the smaller, not the"
    " larger): both halves of a part of n >= 2 hold a sample and the larger holds ceil(n/2)"
    " either way, so the same samples are taken and refused, in the request's order, within"
    " the same bound 2·r·ceil(log2 N) (test_remote_write_salvage_unit); only which requests"
    " carry them differs"
)
_RISING_STEPS = (
    "checkpoint records replay in the order written, their steps never falling (the"
    " merger's step only rises; a new process restores it before writing one)"
)
_DIGEST_SIZE = (
    "only a digest's length: a checkpoint's digest is compared with a retry's, both made"
    " by this code"
)
_WORLD_OF_ONE = (
    "one rank then makes the header and its own 'collectives', which a world of one skips"
    " (Comm), and agrees with itself: the same key set and vote"
)
_MIN_MAX = "low[0] is the least digest and -low[1] the greatest: never greater, so >= is =="
_HOLDERS = "holder counts are only compared with 0 and are never negative"

_WORLD = "a group has at least one rank: world is never below 1"
_RANK = "a rank is never negative: rank <= 0 is rank == 0"

_TRACKER_REF = (
    "a tracker's reference needs only be the same on every rank (trackers are unique by"
    " name, and a tracker's key names it without the index): any constant does"
)

_BOUND_VALUE = (
    "the bound's value is a choice; the tests check the behaviour at the bound, whatever it is"
    " (they read the constant)"
)
_POPPED_FIRST = (
    "the consumer's failure count was read just before, under the same lock's protocol: the"
    " default is reached only when a concurrent success of the same consumer popped it first"
)
JUDGED: dict[str, dict[str, str]] = {
    "telemetry/record/kernels.py": {
        "fills = (padding & inf, padding * sign)": (
            "padding is 0 or all ones (-1): -1 * the sign bit wraps to the sign bit in two's"
            " complement, 0 * it is 0, as with &"
        ),
        "or x.storage_offset() is not first.storage_offset() + i * n": (
            "is not on equal ints above 256 is True: the copying path, with the same result"
        ),
        "keep = masks.keep(xs[ -1].element_size())": _ONE_CALL,
        "keep = masks.keep(xs[ 1].element_size())": _ONE_CALL,
        "shape, dtype = (len(xs), xs[ -1].numel()), xs[0].dtype": _ONE_CALL,
        "shape, dtype = (len(xs), xs[ 1].numel()), xs[0].dtype": _ONE_CALL,
        "shape, dtype = (len(xs), xs[0].numel()), xs[ -1].dtype": _ONE_CALL,
        "shape, dtype = (len(xs), xs[0].numel()), xs[ 1].dtype": _ONE_CALL,
        "return [] if dtype is torch.float64 else [(shape, torch.float64)]": _DTYPE_IDENTITY,
    },
    "collector/merge.py": {
        "self._latest_ns = -1": "times are never negative: max(-1, t) == max(0, t) for t >= 0",
        'if kind >= "counter":': _UNREAD + " (totals are read for counter windows only)",
        'if kind <= "counter":': "no kind sorts below counter: the same test",
        'if w.kind >= "scalar":': _ORDERED_KINDS,
        'if w.kind >= "histogram":': _ORDERED_KINDS,
        'if w.kind <= "counter":': _ORDERED_KINDS,
        'if kind >= "scalar":': _ORDERED_KINDS,
        'elif kind >= "histogram":': _ORDERED_KINDS,
        'elif kind >= "gauge":': _ORDERED_KINDS,
        'elif kind <= "gauge":': _UNREAD + " (latest is read for plain gauges only)",
        "if w.count == 0:": "counts are non-negative (OTLP counts are unsigned)",
        "self._unsaved = True  # windows or a step not in a checkpoint yet": (
            "never read: checkpoint returns while there is no journal, and journal_to sets it"
        ),
        "return kept.points is snapshot.points or _digest(kept) == _digest(snapshot)": (
            "== is a shortcut: equal points encode alike (so the digests agree), save a"
            " signed zero, which a retry (the same request decoded again) never changes"
        ),
        "if step is not None or (self._step is None or step.global_step"
        " > self._step.global_step):": (
            "a checkpoint's step is None only before any step: records replay in the order"
            " written, and the merger's step never goes back to None"
        ),
        "if step is not None and (self._step is None or step.global_step"
        " >= self._step.global_step):": _RISING_STEPS + "; an equal step is the equal Step",
        "if step is not None and (self._step is None or step.global_step"
        " != self._step.global_step):": _RISING_STEPS,
        "if step is not None and (self._step is None or step.global_step"
        " is not self._step.global_step):": _RISING_STEPS + "; an equal step is the equal Step",
        "return hashlib.blake2b(encoded(snapshot), digest_size= 11).hexdigest()": _DIGEST_SIZE,
        "return hashlib.blake2b(encoded(snapshot), digest_size= 13).hexdigest()": _DIGEST_SIZE,
        "@dataclass(frozen=False, slots=True)": (
            "_WorkerState: no code assigns its fields or hashes it (frozen only guards)"
        ),
    },
    "telemetry/otlp/temporality.py": {
        "fresh = current.start_time_unix_nano != 0"
        " and current.start_time_unix_nano >= started_ns": (
            "start times are unsigned (OTLP fixed64): != 0 is > 0"
        ),
        "if count <= 0:": "count >= 0 here: a count drop returned earlier as a restart",
        "return True": "(_moved, current None) the window's extreme is current's None either way",
        "return current < previous if lower else current != previous": (
            "within one series the cumulative max never falls (a restart returned earlier)"
        ),
        "return current != previous if lower else current > previous": (
            "within one series the cumulative min never rises (a restart returned earlier)"
        ),
    },
    "telemetry/record/layout.py": {
        "if self.kind == StateKind.STAT:": _ENUM_IDENTITY,
        "elif self.kind == StateKind.CUSTOM:": _ENUM_IDENTITY,
        "return len(self.ops) - len(STAT_OPS) if self.kind == StateKind.STAT else 0": (
            _ENUM_IDENTITY
        ),
        "if kind == StateKind.STAT:": _ENUM_IDENTITY,
        "if not isinstance(reduce, StatReduce) or reduce == StatReduce.SCALAR:": _ENUM_IDENTITY,
        "if n_buckets < -1 or ops != STAT_OPS + (ReduceOp.SUM,) * n_buckets:": (
            "three ops (n_buckets -1) differ from STAT_OPS, so the second test refuses them too"
        ),
        "description: str = field(init=False, repr=False, compare=True)": (
            "the description is made from compared fields: equal layouts describe alike"
        ),
    },
    "telemetry/record/comm.py": {
        "if self.world != 1 and tensor.numel():": _WORLD,
        "if self.world <= 1:": _WORLD,
        "out: list[object] | None = [None] * self.world if self.rank <= 0 else None": _RANK,
        "parts = [torch.empty_like(tensor) for _ in range(self.world)]"
        " if self.rank <= 0 else None": _RANK,
    },
    "telemetry/record/export.py": {
        "refs.append((source_id, -1))": _TRACKER_REF,
        "refs.append((source_id, 1))": _TRACKER_REF,
        "/,": (
            "reduce_sources' callers (export_sources, a Twinkle metric) pass every argument"
            " after reduce_group by keyword, and export_sources' one caller"
            " (stats_tracker.export_sources) passes key_sync_group by keyword"
        ),
        "reset: bool = False,": (
            "export_sources' default: its one caller, stats_tracker.export_sources, passes"
            " reset (reduce_sources' default is tested)"
        ),
    },
    "telemetry/record/tracker.py": {
        "tag = f\"{self.name and 'default'}_{id(self)}\"": (
            "only the scope variables' debugging names read the tag, and id(self) keeps them apart"
        ),
    },
    "telemetry/record/declared.py": {
        "/,": (
            "add_state's name and reduce: every caller passes them by position, size and"
            " per_rank by keyword"
        ),
    },
    "telemetry/record/checks.py": {
        "if value.dtype is not torch.bool:": _DTYPE_IDENTITY,
        "if value.dtype is torch.bool or value.is_complex():": _DTYPE_IDENTITY,
        "or counts.dtype is not torch.float64": _DTYPE_IDENTITY,
        "or rows.dtype is not torch.float64": _DTYPE_IDENTITY,
        "if value.numel() <= 0:": "numel() is never negative",
        "if value.ndim > 0:  # float() refuses these too (numpy 2)": "ndim is never negative",
        (
            "if not isinstance(reduce_type, StatReduce) or reduce_type == StatReduce.SCALAR:"
        ): _ENUM_IDENTITY,
    },
    "telemetry/record/produce.py": {
        "rows = part.bank(device).take(keys, reset=False)": (
            "the producer call's window is dropped once merged: its rows are never read again"
        ),
    },
    "telemetry/record/accumulate.py": {
        "above = torch.stack([((values > b) * valid).sum() for b in bounds])": _BOOL_MUL,
        "nan = (values.isnan() * valid).sum()": _BOOL_MUL,
        "torch.minimum(state[2: 5], other[2:4], out=state[2:4])": _FOUR,
        "torch.minimum(state[2:4], other[2: 5], out=state[2:4])": _FOUR,
        "torch.minimum(state[2:4], other[2:4], out=state[2: 5])": _FOUR,
        'if device.type < "cpu":': (
            "no device type sorts below cpu, and on the CPU host.to(cpu) returns host itself"
        ),
        'if device.type <= "cpu":': "no device type sorts below cpu: the same test",
        'if device.type <= "cuda":': "cpu returned earlier; no other device type sorts below cuda",
        "host[2] = value if (value != value or value <= host[2]) else host[2]": _EQUAL_EXTREME,
        "host[3] = negated if (negated != negated or negated <= host[3]) else host[3]": (
            _EQUAL_EXTREME
        ),
        "self._device_state = _empty_rows( 2, value.device)[0]": _SAME_ROW,
        "self._device_state = _empty_rows(1, value.device)[ -1]": _SAME_ROW,
        "if entry is not None and entry.reduce != reduce:": (
            "reduce types are enum members: identity and equality agree"
        ),
        "n_buckets = -1": "(ReduceOp.SUM,) * -1 is empty: the layout of 0 bucket counts",
        "@dataclass(frozen=False, slots=True)": (
            "_Taken: no code assigns its fields or hashes it (frozen only guards)"
        ),
    },
    "telemetry/record/reduce.py": {
        **{
            f"{name} = {value}{comment}": (
                "a cache bound's value; the tests read the constant and pin the bound's"
                " behaviour (test_key_agreement.py, test_reduce.py's plan cache)"
            )
            for name, size, comment in (
                ("_PLANS", 16, "  # element plans cached, by digest of the key specs"),
                ("CACHED_UNIONS", 8, ""),
                ("CACHED_GROUPS", 64, ""),
            )
            for value in (size - 1, size + 1)
        },
        "@dataclass(frozen=False, slots=True)": "nothing assigns to a key set's fields",
        "digest = int.from_bytes(hashlib.blake2b(text.encode(), digest_size= 7).digest(),"
        ' "little")': ("another digest, the same on every rank (collisions 2**-56, not 2**-64)"),
        "return cls(keys, {key: layouts[key] for key in keys}, digest >> 2, held_by_all)": (
            "a 62-bit digest instead of 63: still non-negative, and its negation fits int64"
        ),
        "if comm.world == 0:": _WORLD_OF_ONE,
        "if comm.world < 1:": _WORLD_OF_ONE,
        "if comm.world <= 1:": "a world size is at least 1",
        "voted = low[4] != 0": "low[4] is -int(vote): 0 or -1",
        "if low[2] >= -low[3]:": _MIN_MAX,
        "if low[0] >= -low[1]:": _MIN_MAX,
        "cache = [u for u in _unions.pop(group_key, ()) if u.digest is not union.digest]": (
            "a union already cached is only remembered again as the proposal itself (the same"
            " object, so the same digest object); an exchanged union is in no cache, else every"
            " rank would have proposed a covering one"
        ),
        "/,": "the callers pass series and vote by keyword",
        "vote: bool = True,": (
            "the one caller without a vote (reduce_with_spread) discards the answer"
        ),
        "held = [ 2.0 if key in states else 0.0 for key in keys.keys]": _HOLDERS,
        "return {key for key, count in zip(keys, counts) if count != 0}": _HOLDERS,
        'return int.from_bytes(hashlib.blake2b(text, digest_size= 7).digest(), "little", '
        "signed=True)": "another digest, the same on every rank (collisions 2**-56, not 2**-64)",
        "if not len(by_device) == 1:": _ONE_DEVICE,
        "if len(by_device) == 0:": _ONE_DEVICE,
        "if len(by_device) <= 1:": "keys is not empty here: at least one device",
        "if len(by_device) >= 1:": "keys is not empty here: at least one device",
        "if len(by_device) != 1:": _ONE_DEVICE,
        "if len(by_device) == 2:": _ONE_DEVICE,
        "if len(by_device) > 1:": _ONE_DEVICE,
        "if len(by_device) < 1:": _ONE_DEVICE,
        "if world <= 1:": "a world size is at least 1",
        "if bool((headers == headers[ -1]).all()):": (
            "world >= 2 here: every header equals the last iff every one equals the first"
        ),
        "if bool((headers == headers[ 1]).all()):": (
            "world >= 2 here: every header equals the second iff every one equals the first"
        ),
        "if local.numel() <= 0:": "a size is never negative",
        "index = torch.from_numpy(np.flatnonzero(op_codes <= op.value)).to(matrix.device)": (
            "the extra columns are overwritten by the later ops (sum, then min over min and"
            " max columns, then max): every column ends with its own op"
        ),
    },
    "telemetry/metrics/logp_pass.py": {
        _MIN_ROWS % "* 8 + dtype.itemsize": _BIGGER_BUFFER,
        _MIN_ROWS % "* 8 << dtype.itemsize": _BIGGER_BUFFER,
        _MIN_ROWS % "* 8 - dtype.itemsize": _BIGGER_BUFFER,
        _MIN_ROWS % "* 8 * dtype.itemsize": _BIGGER_BUFFER,
        _MIN_ROWS % "* 8 | dtype.itemsize": _BIGGER_BUFFER,
        _MIN_ROWS % "* 8 ^ dtype.itemsize": _BIGGER_BUFFER,
        _MIN_ROWS % "** 8 // dtype.itemsize": _BIGGER_BUFFER,
        _MIN_ROWS % "<< 8 // dtype.itemsize": _BIGGER_BUFFER,
        _MIN_ROWS % "* 9 // dtype.itemsize": (
            "27 // 4 == 24 // 4 and 27 // 8 == 24 // 8: the same sizes"
        ),
        "if dtype is torch.float64:": _DTYPE_IDENTITY,
        "if dtype is not torch.float64:": _DTYPE_IDENTITY,
        "logp_high = logps.nan_to_num_(-_INF, _INF, +_INF).amax(1)": _NO_MINUS_INF_LOGP,
        "logp_high = logps.nan_to_num_(-_INF, _INF, not _INF).amax(1)": _NO_MINUS_INF_LOGP,
        "logp_high = logps.nan_to_num_(-_INF, _INF, _INF).amax(1)": _NO_MINUS_INF_LOGP,
        "d = logps[ 1].copy_(d)": _SPENT_ROW,
        "d = logps[ -1].copy_(d)": _SPENT_ROW,
    },
    "telemetry/metrics/train_infer_states.py": {
        "if dtype is torch.float64:": _DTYPE_IDENTITY,
        "max_k3 = torch.expm1(ends).sub_(ends).amax( -1, keepdim=True)": _ONE_DIM,
        "flags = values.index_select(0, first) > values.index_select( -1, greater)": _ONE_DIM,
        "flags = values.index_select( -1, first) > values.index_select(0, greater)": _ONE_DIM,
        "product = values.index_select( -1, self._x) * values.index_select(0, self._y)": _ONE_DIM,
        "product = values.index_select(0, self._x) * values.index_select( -1, self._y)": _ONE_DIM,
        "states = torch.where(flags.index_select( -1, self._empty), math.inf, states)": _ONE_DIM,
        "states = torch.where(flags.index_select( -1, self._nan), math.nan, states)": _ONE_DIM,
        "max_abs = ends.mul_(self._to_abs).amax( -1, keepdim=True)": _ONE_DIM,
        "combos = torch.mv(self._combine, values.narrow( -1, *self._counts))": _ONE_DIM,
        "values = torch.cat([values, flags, combos, combos != 0])": (
            "the combinations are counts, never negative (a tail's d above log t is above"
            " -log t too; buckets are differences of counts above rising bounds): != 0 is > 0"
        ),
        "n_buckets = len(bounds) + 1 if bounds else -1": (
            "without bounds: range(-1) and a list times -1 are empty, as with 0"
        ),
    },
    "telemetry/metrics/train_infer.py": {
        "sorted({s * math.log(t) for t in TAIL_THRESHOLDS for s in (-1.0, 1.0)} ^ {0.0})": (
            "0 is none of the +-log t: the symmetric difference adds it as the union does"
        ),
        "CHUNK_TOKENS = 1 << 17": _CHUNKS,
        "CHUNK_TOKENS = 1 << 19": _CHUNKS,
        "CHUNK_TOKENS = 2 << 18": _CHUNKS,
        "step = max(1, CHUNK_TOKENS // max( 2, row_len))": _CHUNKS,
        "step = max(1, CHUNK_TOKENS // max( 0, row_len))": _NO_EMPTY,
        "return [slice(i, min(i + step, n_rows)) for i in range(0, max(n_rows, 0), step)]": (
            _NO_EMPTY
        ),
        "if mask.numel() <= 0:": "a size is never negative",
        "if len(shape) < 1:": _ROWS,
        "if len(shape) < 3:": _ROWS,
        "if len(shape) <= 2:": _ROWS,
        "if len(shape) != 2:": _ROWS,
        "return mask if mask.dtype == torch.bool else mask > 0": (
            "masks are bool or 0/1 integers (documented): > 0 is != 0"
        ),
        "if value.dtype is torch.bool or value.is_complex():": "torch dtypes are singletons",
    },
    "exporters/queued.py": {
        "if thread is not None and thread != threading.current_thread():": (
            "threads compare by identity: != is is not"
        ),
        (
            "thread.join(max( -1.0, deadline - min(CANCEL_GRACE_S, timeout_s / 4)"
            " - time.monotonic()))"
        ): _JOIN_NEGATIVE,
        "thread.join(max( -1.0, deadline - time.monotonic()))": _JOIN_NEGATIVE,
        "return self._tally.streak != 0 or failing or self._caller.stalled": (
            "the failure streak is never negative: != 0 is > 0"
        ),
    },
    "exporters/bounded_queue.py": {
        "if not TYPE_CHECKING:": (
            "importing MemoryCharge and Snapshot at run time as well changes nothing (no cycle)"
        ),
        "if reserved and self._reserved != 0:": "_reserved is never negative (release clamps at 0)",
        "return deadline is not None and time.monotonic() >= deadline": (
            "a monotonic reading exactly at the drain deadline: a tie no test can arrange"
        ),
    },
    "exporters/tally.py": {
        "def add(self, /, dropped: int = 0, retried: int = 0, timed_out: int = 0) -> None:": (
            "every caller passes the counts by keyword"
        ),
        "if self.streak <= 1:": "streak was just incremented: it is at least 1",
        "default_factory=threading.Lock, init=True, repr=False, compare=False": (
            "a copy then shares the live stats' lock: each call holds it briefly; no counter"
            " is shared"
        ),
    },
    "exporters/bearer.py": {
        (
            "MAX_PEERS = 1023  # clients whose last line is remembered; the oldest is"
            " forgotten past it"
        ): _BOUND_VALUE,
        (
            "MAX_PEERS = 1025  # clients whose last line is remembered; the oldest is"
            " forgotten past it"
        ): _BOUND_VALUE,
        'since = "" if count <= 1 else f" ({count} refused from it since its last line)"': (
            "count was just incremented: it is at least 1"
        ),
    },
    "collector/signal_service.py": {
        "if failures <= 1:": "failures was just incremented: it is at least 1",
        "failures = self._failing.pop(index, -1)": _POPPED_FIRST,
        "failures = self._failing.pop(index, 1)": _POPPED_FIRST,
        "@dataclass(frozen=False)": "nothing assigns to a signal kind or to a counts copy",
        "flushed = self.flush() if self.journal is not None else True": (
            "flushed is read only when there is a journal"
        ),
    },
    "exporters/timed_call.py": {
        "self._stalled.join(max( -1.0, timeout_s))": _JOIN_NEGATIVE,
    },
    "exporters/retry.py": {
        "if not again(answer) or (max_retries is not None and retries == max_retries):": (
            "retries counts up from 0 by one, so it reaches any max_retries >= 0 exactly:"
            " == stops where >= does; no bound is negative (the one config that sets it,"
            " traces.forward.max_retries, says ge=0; the queue's is its default, 3)"
        ),
    },
    "exporters/queue_worker.py": {
        "if not TYPE_CHECKING:": (
            "importing MemoryCharge and Snapshot at run time as well changes nothing (no cycle)"
        ),
        "if result == ExportResult.SUCCESS:": _ENUM_IDENTITY,
        "if result is not None and result != ExportResult.FAILURE:": _ENUM_IDENTITY,
        "if waited is _GIVE_UP:": "_wait_backoff returns the module's own constant objects",
        "if waited is _SPILLED:": "_wait_backoff returns the module's own constant objects",
        "if waited <= _GIVE_UP:": (
            'of "waited", "give up" and "spilled" only "give up" sorts <= "give up"'
        ),
        "elif attempt == self.max_retries:": (
            "attempt counts up by 1 from 0 and stops at max_retries: it never passes it"
        ),
        "self._cond.wait(end % now)": _MOD_CLOCK,
        "self._succeeded(time.monotonic() % start)": _MOD_CLOCK,
        "prolonged = since is not None and time.monotonic() % since >= self.spill_after_s": (
            _MOD_CLOCK
        ),
        "return prolonged and (depth > -1 or held is not None)": _SPILL_NOTHING,
        "return prolonged and (depth >= 0 or held is not None)": _SPILL_NOTHING,
        "break": (
            "reached only when the drain deadline passes between the loop's first check and"
            " this one (microseconds); the worker then ends without spilling, and shutdown's"
            " own spill moves the same queue in the same order (the loop's other continues"
            " turned into break are killed)"
        ),
        "if snapshot is not None and time.monotonic() - since > self.spill_after_s:": (
            _CLOCK_EQUAL
        ),
        "if deadline is not None and end >= deadline:": _CLOCK_EQUAL,
        "return deadline is not None and time.monotonic() >= deadline": _CLOCK_EQUAL,
        "prolonged = since is not None and time.monotonic() - since > self.spill_after_s": (
            _CLOCK_EQUAL
        ),
        "if snapshot is not None and time.monotonic() - since is self.spill_after_s:": (
            "never true, as == almost never: the backoff right after spills on the same"
            " condition (_spill_due), in the same order"
        ),
        "new = self._streak <= 1 or kind != self._failure_kind": (
            "the streak was just incremented from >= 0: it is >= 1, so <= 1 is == 1"
        ),
        "if snapshot is not None and time.monotonic() - since == self.spill_after_s:": (
            "the backoff that follows at once spills the held snapshot on the same condition"
            " (_spill_due), in the same order"
        ),
        "if now > end:": "a tie waits 0 s more and then returns the same",
        "if snapshot is not None and time.monotonic() % since >= self.spill_after_s:": _MOD_CLOCK,
        "def _count(self, /, retried: int = 0, timed_out: int = 0) -> None:": (
            "every caller passes retried and timed_out by keyword: / accepts the same calls"
        ),
        "latency_s: float = 1.0": (
            "the default latency is that of an answer that never came; only a SUCCESS answer's"
            " latency is read, and it is always given"
        ),
        "latency_s: float = -1.0": (
            "the default latency is that of an answer that never came; only a SUCCESS answer's"
            " latency is read, and it is always given"
        ),
        "return _Answer(result, latency_s=time.monotonic() % start)": _MOD_CLOCK,
        "self.backlog.wait(end % now)  # woken by submit (to spill) and by close": _MOD_CLOCK,
        (
            "prolonged = since is not None and time.monotonic() % since >="
            " self.policy.spill_after_s"
        ): _MOD_CLOCK,
        "if self.give_up or (deadline is not None and end >= deadline):": _CLOCK_EQUAL,
        "if seq is not None or self.acks is not None:": (
            "a sequence number exists only with a journal, and with one the acks exist:"
            " or and and agree on every reachable pair"
        ),
        "self.acks.done(seq, self.backlog.depth <= 0)": "the depth is never negative",
        "if self.flush_failures <= 1:": (
            "the count was just incremented from >= 0: it is >= 1, so <= 1 is == 1"
        ),
        "answer.result == ExportResult.FAILURE": _ENUM_IDENTITY,
        "elif result is not None and result != ExportResult.FAILURE:": _ENUM_IDENTITY,
        "def _spill_due(self, held: Snapshot | None, busy: bool = True) -> bool:": (
            "only the drain loop's check before a replay uses the default: with True it"
            " spills the queue at the replay's backoff instead (_wait_backoff passes busy),"
            " the same snapshots in the same order, one replay later"
        ),
        (
            "prolonged = since is not None and time.monotonic() - since > self.policy.spill_after_s"
        ): _CLOCK_EQUAL,
        "return prolonged and not busy and (depth > -1 or held is not None)": _SPILL_NOTHING,
        "return prolonged and not busy and (depth >= 0 or held is not None)": _SPILL_NOTHING,
        "return prolonged and not busy and (depth != 0 or held is not None)": (
            "the depth is never negative: != 0 is > 0"
        ),
        "return len(self.overflow) != 0": "a length is never negative: != 0 is > 0",
    },
    "exporters/fanout.py": {
        "left = self._held.get(queued, -1)": "-1 and 0 are both no slot (left <= 0)",
        "if left == 0:": "left is never negative: it starts at n >= 0 and falls only from > 0",
        "if left > -1:": _RELEASE_ZERO,
        "if left >= 0:": _RELEASE_ZERO,
        "if left != 0:": _RELEASE_ZERO,
        'name = base if seen[base] <= 1 else f"{base}#{seen[base]}"': "seen[base] >= 1 here",
        "remaining = max( -1.0, deadline - time.monotonic())": (
            "Event.wait of a negative timeout returns at once, as of 0"
        ),
        "queued.shutdown(max( -1.0, deadline - time.monotonic()))": (
            "QueuedSink.shutdown clamps every wait at 0: a budget of -1 s is one of 0 s"
        ),
        "if not TYPE_CHECKING:": (
            "importing SinkFactory at run time as well changes nothing (exporters.factory"
            " imports only exporters.base: no cycle)"
        ),
        "return next((q.sink for q in self.queued if q.sink.factory == factory), None)": (
            "a package's factory is one module constant: a factory equal in every field"
            " (name, switch, the same functions) is that constant, so == finds what identity finds"
        ),
    },
    "exporters/otlp/spool.py": {
        "self._next_seq = 1": _SEQ,
        "self._next_seq = seq + 2": _SEQ,
        "self._next_seq += 2": _SEQ,
        "return None, -1": "the points of a name that is not an entry are never read",
        "return None, 1": "the points of a name that is not an entry are never read",
        'if data.get("format") is not _FORMAT:': (
            "the format is written as the int 1, read back as CPython's cached small int"
        ),
    },
    "collector/durable.py": {
        'self._lock_fd = os.open(self.directory / "lock", os.O_RDWR + os.O_CREAT, 0o644)': (
            _DISJOINT_FLAGS
        ),
        'self._lock_fd = os.open(self.directory / "lock", os.O_RDWR ^ os.O_CREAT, 0o644)': (
            _DISJOINT_FLAGS
        ),
        "fcntl.flock(self._lock_fd, fcntl.LOCK_EX + fcntl.LOCK_NB)": _DISJOINT_FLAGS,
        "fcntl.flock(self._lock_fd, fcntl.LOCK_EX ^ fcntl.LOCK_NB)": _DISJOINT_FLAGS,
        'names = {_UNSAFE.sub("_", queued.name) for queued in fanout.queued} ^ {MERGE}': (
            "no sink is named rollout-merge (a sink's name is its kind, a word, or kind#N):"
            " the sets are disjoint, so ^ is |"
        ),
    },
    "collector/baselines.py": {
        "if record_seq < seq:": (
            "the record at the state's seq is the last one the state folded: replaying it sets"
            " its series to the values the state holds"
        ),
        "replayed += 2": "replayed is only tested for being non-zero",
        'if data["version"] is not VERSION:': (
            "JSON's small ints and VERSION are CPython's cached small ints: is not is !="
        ),
        "return 0, {}, - 2": _SEQ_FROM_ZERO,
        "return 0, {}, ~1": _SEQ_FROM_ZERO,
        "self._state_bytes = -1": _STATE_BEFORE_COMPACT,
        "self._state_bytes = 1": _STATE_BEFORE_COMPACT,
    },
    "exporters/record_log.py": {
        "@dataclass(frozen=False, slots=True)": "nothing assigns a Record's fields",
        "self._written = -1  # bytes in the open segment": _FIRST_SEGMENT,
        "self._written = 1  # bytes in the open segment": _FIRST_SEGMENT,
        "self._dirty = True": (
            "read only while a segment is open, and the append that opens one sets it"
        ),
        "self.unreadable += corrupt + (end < len(data))": _NOT_PAST_END,
        "if record.segment is not segment:": (
            "at worst the segment is read again for a record: the same bytes"
        ),
        "if len(payload) != size:": "a read returns at most size bytes: != is <",
        "if size >= record.size and zlib.crc32(payload) != record.crc:": (
            "size is min(limit, record.size), never more: >= is =="
        ),
        "if size is record.size and zlib.crc32(payload) != record.crc:": (
            "min(limit, record.size) returns record.size itself when they are equal"
        ),
        "self._written >= self.segment_bytes or os.fstat(self._fd).st_nlink <= 0": _NLINK,
        "self._fd = os.open(path, os.O_WRONLY + os.O_CREAT | os.O_APPEND, 0o644)": _DISJOINT_FLAGS,
        "self._fd = os.open(path, os.O_WRONLY | os.O_CREAT + os.O_APPEND, 0o644)": _DISJOINT_FLAGS,
        "self._fd = os.open(path, os.O_WRONLY ^ os.O_CREAT | os.O_APPEND, 0o644)": _DISJOINT_FLAGS,
        "self._fd = os.open(path, os.O_WRONLY | os.O_CREAT ^ os.O_APPEND, 0o644)": _DISJOINT_FLAGS,
        "if fd is None or os.fstat(fd).st_nlink >= 0:": (
            "acked is opened again for every ack: the same line written (a cost, not a result)"
        ),
        "if fd is None or os.fstat(fd).st_nlink <= 0:": _NLINK,
        "fd = os.open(self.directory / _ACKED, os.O_WRONLY + os.O_CREAT, 0o644)": _DISJOINT_FLAGS,
        "fd = os.open(self.directory / _ACKED, os.O_WRONLY ^ os.O_CREAT, 0o644)": _DISJOINT_FLAGS,
        "end = self._segments[i + 1][0] - 1 if i != last else self._next - 1": (
            "i runs up to last: != is <"
        ),
        "if (keep_last and i >= last) or end > self._acked:": "i runs up to last: >= is ==",
        "if end is not len(data) and (following is None or not following[1]):": _LAST_FAILED,
        "if end < len(data) and (following is None or not following[1]):": _NOT_PAST_END,
        "if end <= len(data) and (following is None or not following[1]):": _LAST_FAILED,
        "if start & size > len(data):": _CRC_CATCHES,
        "if start | size > len(data):": _CRC_CATCHES,
        "if start ^ size > len(data):": _CRC_CATCHES,
        "if start >> size > len(data):": _CRC_CATCHES,
        "if start - size > len(data):": _CRC_CATCHES,
    },
    "exporters/journal.py": {
        "self._fd = os.open(path, os.O_WRONLY ^ os.O_CREAT | os.O_APPEND, 0o644)": _DISJOINT_FLAGS,
        "self._fd = os.open(path, os.O_WRONLY + os.O_CREAT | os.O_APPEND, 0o644)": _DISJOINT_FLAGS,
        "self._fd = os.open(path, os.O_WRONLY | os.O_CREAT ^ os.O_APPEND, 0o644)": _DISJOINT_FLAGS,
        "self._fd = os.open(path, os.O_WRONLY | os.O_CREAT + os.O_APPEND, 0o644)": _DISJOINT_FLAGS,
        "end = self._segments[i + 1][0] - 1 if i != last else self._next - 1": (
            "i runs up to last: != is <"
        ),
        "if (keep_last and i >= last) or end > self._acked:": "i runs up to last: >= is ==",
        "self._written = 1  # bytes in the open segment": _FIRST_SEGMENT,
        "self._written = -1  # bytes in the open segment": (
            "the first append opens a segment (there is no fd before it), which sets it to 0"
            " before it is read"
        ),
        "self._dirty = True": (
            "nothing reads it before the first append opens a segment and sets it"
        ),
        "self._flushed_at = -1.0": _BOOT_CLOCK,
        "self._flushed_at = 1.0": _BOOT_CLOCK,
        "if end is not len(data) and (following is None or not following[2]):": _LAST_FAILED,
        "if end <= len(data) and (following is None or not following[2]):": _LAST_FAILED,
        "self.unreadable += corrupt + (0 if last >= len(data) else 1)": (
            "the last record read never ends past the data: >= is =="
        ),
        "self._fd = os.open(path, os.O_WRONLY | os.O_CREAT % os.O_APPEND, 0o644)": (
            "a segment is always a new file (a new name per open) written only through this"
            " fd: its writes land at its end with or without O_APPEND"
        ),
        "end = self._segments[i + 1][0] - 1 if i is not last else self._next - 1": _FEW_SEGMENTS,
        "if (keep_last and i is last) or end > self._acked:": _FEW_SEGMENTS,
        "if end < len(data) and (following is None or not following[2]):": (
            "a record never ends past the data: < is !="
        ),
        "if len(payload) != size:": "a slice is never longer than asked: != is <",
        "settle_s: float = -1.0,": (
            "with a settle time of -1 s or 0 s, what a flush holds is acked in that flush's call"
        ),
        "due = idle and time.monotonic() - self._flushed_at > self._interval_s": (
            "a monotonic reading exactly interval_s after the last flush never happens"
        ),
        "if len(payload) > size:": (
            "a cut payload fails its CRC and, with no record after it, ends the reading as the"
            " torn tail it is: the same count and the same records"
        ),
    },
    "exporters/remote_write/health.py": {
        "if self.state > DOWN:": "of the three states (down, ok, refusing) none sorts below down",
        "if self.state is OK:": _STATES,
        "if self.state is not OK:": _STATES,
        "if self.state is not DOWN:": _STATES,
        "if self.state is not REFUSING:": _STATES,
        'f"{PREFIX}degraded", "1 while the receiver is down or refusing writes",'
        " c.state is not OK": _STATES,
        "if self.state < REFUSING:": "refusing sorts after both other states (down, ok): < is !=",
    },
    "exporters/remote_write/kept_backlog.py": {
        "if self.unsent == 0:": (
            "unsent counts down from the writes taken up by the kept writes that leave: it"
            " reaches 0, never below"
        ),
        "self.unsent = -1  # writes taken up that have not left the backlog yet": _TAKEN_UP,
        "self.unsent = 1  # writes taken up that have not left the backlog yet": _TAKEN_UP,
    },
    "exporters/remote_write/sink.py": {
        "lambda: not self._writes.pending or self.health.state is DOWN,": _STATES,
        "lambda: not self._writes.pending or self.health.state <= DOWN,": _DOWN_FIRST,
        "if self._keep is not None and self.health.state is DOWN:": _STATES,
        "if self._keep is not None and self.health.state <= DOWN:": _DOWN_FIRST,
        "self._sender.join(max( -1.0, deadline - time.monotonic()))": _JOIN_NEGATIVE,
        "self._refresher.join(max( -1.0, deadline - time.monotonic()))": _JOIN_NEGATIVE,
        "if outcome == ExportResult.FAILURE:": _ENUM_IDENTITY,
        "taken = samples if outcome == ExportResult.SUCCESS else 0": _ENUM_IDENTITY,
        "return answer[0] == ExportResult.FAILURE": _ENUM_IDENTITY,
        "refused = samples >> taken": (
            "taken is samples or 0: n >> n is 0 (n < 2**n) and n >> 0 is n, as n - n and n - 0"
        ),
        "refused = samples ^ taken": (
            "taken is samples or 0: n ^ n is 0 and n ^ 0 is n, as n - n and n - 0"
        ),
        "return True": (
            "(_done once shutdown abandoned the batch; _pause's return False -> True is killed)"
            " the sender then goes back to its loop's top, which returns on _abandoned under"
            " the same lock first: nothing is counted or sent either way"
        ),
        "return not self._abandoned or not self._past_deadline()": (
            "shutdown sets _abandoned only after its join of the sender timed out at the"
            " deadline (or at once past it: kept while down), so abandoned is never seen before"
            " the deadline; past it and not abandoned, the one more try `or` allows is refused"
            " unsent by _post (its remaining time is <= 0.01 s too) and the next pause stops:"
            " nothing sent or counted"
        ),
        "return until is not None and until - time.monotonic() < 0.01": (
            "a monotonic reading exactly 10 ms before the deadline (the one float where < and"
            " <= differ) never happens"
        ),
    },
    "exporters/remote_write/timeline.py": {
        'STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[ -1]': (
            "struct.unpack of one double is a 1-tuple: [-1] is [0]"
        ),
    },
    "exporters/remote_write/writes.py": {
        "while self.pending > bound + self.sending and len(self.queue) != 1:": (
            "the queue holds at least the write just appended: != 1 is > 1"
        ),
    },
    "exporters/remote_write/salvage.py": {
        'if outcome != ExportResult.PERMANENT_FAILURE or not detail.startswith("HTTP 400:"):': (
            _ENUM_IDENTITY
        ),
        "if outcome == ExportResult.FAILURE:": _ENUM_IDENTITY,
        "if outcome == ExportResult.SUCCESS:": _ENUM_IDENTITY,
        "self.refused = 0 if len(samples) != 1 else len(samples)  # one sample: refused alone": (
            "a length is never negative: != 1 differs from > 1 only for 0 samples, where both"
            " give 0"
        ),
        "elif len(part) != 1 and per_sample(outcome, detail):": (
            "a part is never empty (a request of >= 2 samples, halved only while >= 2, each"
            " half of n >= 2 holding >= 1): != 1 is > 1"
        ),
        "middle = (len(part) + 0) // 2": _ODD_HALF,
        "middle = (len(part) * 1) // 2": _ODD_HALF,
        "middle = (len(part) // 1) // 2": _ODD_HALF,
        "middle = (len(part) ** 1) // 2": _ODD_HALF,
        "middle = (len(part) | 1) // 2": _ODD_HALF,
        "middle = (len(part) ^ 1) // 2": _ODD_HALF,
    },
}

IDENTITY_OPERATORS = ("ReplaceComparisonOperator_Eq_Is", "ReplaceComparisonOperator_NotEq_IsNot")


def literal_comparisons(source: str) -> set[int]:
    """Lines holding a comparison with a string or small-integer literal operand."""
    lines = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(
                isinstance(o, ast.Constant)
                and (isinstance(o.value, str) or (type(o.value) is int and -5 <= o.value <= 256))
                for o in operands
            ):
                lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def dataclass_slots(source: str) -> set[tuple[int, int]]:
    """Positions of the ``True`` in every ``@dataclass(..., slots=True, ...)``."""
    positions = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for decorator in node.decorator_list:
            if not (isinstance(decorator, ast.Call) and _name(decorator.func) == "dataclass"):
                continue
            for keyword in decorator.keywords:
                value = keyword.value
                if (
                    keyword.arg == "slots"
                    and isinstance(value, ast.Constant)
                    and value.value is True
                ):
                    positions.add((value.lineno, value.col_offset))
    return positions


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def mutated_line(diff: str) -> str:
    """The line the mutant wrote, from cosmic-ray's unified diff."""
    for line in diff.splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            return line[1:].strip()
    return "?"


def skip_annotations(session: str, root: str = ".") -> int:
    """Mark every pending mutant inside an annotation as skipped (it cannot be killed)."""
    from cosmic_ray.work_db import use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    spans: dict[str, list] = {}
    skipped = 0
    with use_db(session) as db:
        for item in list(db.pending_work_items):
            mutation = item.mutations[0]
            path = str(mutation.module_path)
            if path not in spans:
                spans[path] = annotation_spans((Path(root) / path).read_text())
            start = tuple(mutation.start_pos)
            if any(a <= start < b for a, b in spans[path]):
                db.set_result(
                    item.job_id,
                    WorkResult(worker_outcome=WorkerOutcome.SKIPPED),
                )
                skipped += 1
    print(f"{skipped} mutants inside annotations skipped")
    return 0


def reuse_killed(old: str, old_root: str, session: str, root: str = ".") -> int:
    """Copy ``old``'s killed results into ``session`` for unchanged modules."""
    from cosmic_ray.work_db import use_db

    def key(item):
        m = item.mutations[0]
        return (str(m.module_path), m.operator_name, m.occurrence, tuple(m.start_pos))

    with use_db(old) as db:
        killed = {
            key(item): result
            for item, result in db.completed_work_items
            if result.test_outcome is not None and result.is_killed
        }
    same: dict[str, bool] = {}
    reused = 0
    with use_db(session) as db:
        for item in list(db.pending_work_items):
            path = str(item.mutations[0].module_path)
            if path not in same:
                old_text = (Path(old_root) / path).read_text()
                same[path] = old_text == (Path(root) / path).read_text()
            if same[path] and key(item) in killed:
                db.set_result(item.job_id, killed[key(item)])
                reused += 1
    print(f"{reused} killed results reused from {old}; modules unchanged: {same}")
    return 0


def main(session: str, root: str = ".") -> int:
    dump = subprocess.run(
        [str(Path(sys.executable).with_name("cosmic-ray")), "dump", session],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    killed = equivalent = judged = 0
    survivors = []
    spans: dict[str, list] = {}
    literal_lines: dict[str, set[int]] = {}
    slots: dict[str, set[tuple[int, int]]] = {}
    for line in dump.splitlines():
        item, result = json.loads(line)
        if not result:
            continue
        mutation = item["mutations"][0]
        path = mutation["module_path"]
        if path not in spans:
            source = (Path(root) / path).read_text()
            spans[path] = annotation_spans(source)
            literal_lines[path] = literal_comparisons(source)
            slots[path] = dataclass_slots(source)
        start = tuple(mutation["start_pos"])
        operator = mutation["operator_name"].split("/")[-1]
        mutant = mutated_line(result.get("diff") or "")
        if result.get("worker_outcome") == "skipped":
            equivalent += 1  # inside an annotation: skipped by --skip-annotations
        elif result.get("test_outcome") != "survived":
            killed += 1
        elif mutant in JUDGED.get(path, {}):
            judged += 1
        elif (
            any(a <= start < b for a, b in spans[path])
            or (operator in IDENTITY_OPERATORS and start[0] in literal_lines[path])
            or (operator == "ReplaceTrueWithFalse" and start in slots[path])
        ):
            equivalent += 1
        else:
            survivors.append((path, start[0], operator, mutant))
    scored = killed + len(survivors)
    score = 100.0 * killed / scored if scored else 100.0
    print(
        f"killed {killed} of {scored} non-equivalent mutants ({score:.1f} %); "
        f"{equivalent} equivalent (annotations, identity of literals, dataclass slots), "
        f"{judged} judged equivalent by hand (JUDGED)"
    )
    for path, line_no, operator, mutant in sorted(survivors):
        text = (Path(root) / path).read_text().splitlines()[line_no - 1].strip()
        print(f"  survived {path}:{line_no} {operator}: {text}")
        print(f"      mutant: {mutant}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--skip-annotations"]:
        sys.exit(skip_annotations(*sys.argv[2:]))
    if sys.argv[1:2] == ["--reuse-killed"]:
        sys.exit(reuse_killed(*sys.argv[2:]))
    sys.exit(main(*sys.argv[1:]))
