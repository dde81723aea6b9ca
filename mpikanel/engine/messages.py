"""Message tags and the one frame layout every push and reply uses.

A frame is one contiguous byte buffer sent as ``MPI.BYTE``:

    [ int64 header x HEADER_INTS | float64 meta x META_FLOATS | float64 payload x n_params ]

Integer fields live in their own int64 section so clocks and counts stay exact
(a float32 frame is exact only to 2**24). Buffers are preallocated and reused; numpy
views give typed access without copies. A frame with the SPARSE flag carries
``int64 keys x NNZ | float64 values x NNZ`` as its payload instead of the whole range
(mpikanel.engine.sparse), and is sent only as long as it is. A reply under dense frames goes
as two messages: its header and meta (REPLY), then the payload alone (REPLY_DATA).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from .sparse import payload_nbytes, unpack


class Tag(IntEnum):
    """MPI tags; one place for all of them."""

    PUSH = 11    # worker -> server: header + delta
    REPLY = 12   # server -> worker: header + fresh parameters
    STATE = 13   # worker, server k > 0 -> server 0: the manifest entry of the checkpoint part it
                 # wrote (pickled, small; checkpoints and a worker's last push only)
    PROBE = 14        # worker -> server: header-only "what would a push cost now?" (ESP)
    PROBE_REPLY = 15  # server -> worker: header-only answer, sent at once (even while holding)
    CONTROL = 16      # server 0 -> server k > 0: the ops that replay its decisions (int64, see Op)
    SLICE = 17        # server k > 0 -> server 0: its key range of the parameters (float64)
    SERVER_STATS = 18  # server k > 0 -> server 0: its counters at the end (pickled; once)
    REPLY_DATA = 19   # server -> worker, dense frames: the range of a REPLY, sent from the shared
                      # snapshot as its own contiguous message (a joined datatype is packed by MPI)
    SNAPSHOT = 20     # server k > 0 -> server 0, after its SERVER_STATS: its range of each loss-curve
                      # snapshot, oldest first (float32; once, at the end of the run)
    ASK = 21          # worker -> server, flow control: no data, "may I push?" (mpikanel.engine.flow)
    GO = 22           # server -> worker, flow control: no data, "a frame is posted for your push"


class H(IntEnum):
    """Indices into the int64 header."""

    CLOCK = 0      # push: worker clock after this push; reply: echo of the clock it answers
    STEPS = 1      # push: local SGD steps folded into this delta
    FLAGS = 2      # Flag bits
    VERSION = 3    # reply: server version (pushes applied so far); push: version of the base
    PLAN = 4       # reply: local steps the worker should run before its next push
    BUSY = 5       # reply: other pushes that arrived with this one (congestion hint, not policy holds);
                   # probe answer: pushes arrived and not yet handled when the probe was answered
    SAMPLES = 6    # push: training samples folded into this delta (counted against the budget)
    LEASE = 7      # reply: samples the worker may process beyond the push this reply answers
    NNZ = 8        # push, reply with the SPARSE flag: keys in the payload (mpikanel.engine.sparse layout)
    SEQ = 9        # reply with CHECKPOINT: the number of the checkpoint to write this worker's part into
    COUNTED = 10   # reply: samples the server has counted against the budget (a rate schedule's progress)


class M(IntEnum):
    """Indices into the float64 meta section."""

    STEP_S = 0      # push: mean compute seconds per step since the last push
    HELD_S = 1      # reply: seconds the server held this push before answering
    RTT_S = 2       # push: worker's last measured exchange round-trip
    UPDATE_NORM = 3  # reply, probe answer: recent norm of one applied delta (EWMA)
    SERVICE_S = 4    # probe answer: recent server seconds per push handled (EWMA)
    RECV_BPS = 5     # probe answer: bytes per second the server has been receiving (recent)


class Flag(IntEnum):
    """Bits for the FLAGS header field."""

    DONE = 1            # push: worker's last push; it leaves every barrier afterwards
    STOP = 2            # reply: stop after sending your state (the run checkpointed; resume later)
    HAS_DELTA = 4       # push: payload carries a delta (else header-only)
    CHECKPOINT = 8      # reply: write your part of checkpoint SEQ now, send the server its manifest entry
    STOP_REQUEST = 16   # push: this worker got SIGTERM/SIGUSR1; checkpoint and stop the run
    FINISH = 32         # reply: the work budget is spent: push your unsent work as DONE and leave
    CRITICAL = 64       # reply (PSP): your push closes the next round: push on plan and block
    SPARSE = 128        # push, reply: the payload is NNZ keys then NNZ values, not the whole range


class Op(IntEnum):
    """What server 0 tells the other servers to do, in its order (a CONTROL message is int64
    ``[n_ops, kind, w, arg, kind, w, arg, ...]``)."""

    APPLY = 1   # add worker w's waiting delta; arg: the scale's float64 bits
    REPLY = 2   # answer worker w with your range now; arg: 1 = listen for its next push
    SLICE = 3   # send your range to server 0 (SLICE tag); arg: 1 = and what was scaled away
    END = 4     # every worker has left: send your stats, then stop
    CHECKPOINT = 5  # write your part of checkpoint number arg, send its manifest entry (STATE tag)
    SNAPSHOT = 6    # keep a copy of your range for the loss curve; arg: server 0's thinning decisions
                    # (mpikanel.metrics THIN, REPLACE bits); the copies go to server 0 after END


OP_INTS = 3


def control_ints(n_workers: int) -> int:
    """Length of a CONTROL buffer: every worker applied and answered, plus a slice, a checkpoint,
    a snapshot and an end."""
    return 1 + OP_INTS * (2 * n_workers + 4)


def scale_bits(scale: float) -> int:
    """An APPLY op's scale as the int64 with its float64 bits (exact)."""
    return int(np.float64(scale).view(np.int64))


def bits_scale(bits: int) -> float:
    """The inverse of scale_bits."""
    return float(np.int64(bits).view(np.float64))


HEADER_INTS = len(H)
META_FLOATS = len(M)
PAYLOAD_OFFSET = 8 * (HEADER_INTS + META_FLOATS)


def frame_nbytes(n_params: int) -> int:
    """Size in bytes of a frame carrying n_params float64 values."""
    return PAYLOAD_OFFSET + 8 * n_params


@dataclass
class Frame:
    """A preallocated frame buffer with typed views onto its sections."""

    buf: np.ndarray
    header: np.ndarray
    meta: np.ndarray
    payload: np.ndarray

    @classmethod
    def allocate(cls, n_params: int) -> "Frame":
        """Allocate a zeroed frame for n_params float64 payload slots."""
        buf = np.zeros(frame_nbytes(n_params), dtype=np.uint8)
        header = buf[: 8 * HEADER_INTS].view(np.int64)
        meta = buf[8 * HEADER_INTS: PAYLOAD_OFFSET].view(np.float64)
        payload = buf[PAYLOAD_OFFSET:].view(np.float64)
        return cls(buf, header, meta, payload)

    def has(self, flag: Flag) -> bool:
        """True when the FLAGS header field has this bit set."""
        return bool(self.header[H.FLAGS] & flag)

    def nbytes(self, n: int) -> int:
        """Bytes of the message this frame holds for a range of n keys (dense or SPARSE)."""
        return PAYLOAD_OFFSET + payload_nbytes(self.has(Flag.SPARSE), int(self.header[H.NNZ]), n)

    def entries(self, n: int) -> tuple[np.ndarray | None, np.ndarray]:
        """(keys, values) of a SPARSE frame; (None, the whole range) of a dense one of n keys."""
        if self.has(Flag.SPARSE):
            return unpack(self.payload, int(self.header[H.NNZ]))
        return None, self.payload[:n]


@dataclass
class Answer:
    """A reply as the server core decides it: the header fields (the payload is the server's parameters,
    at ``keys`` when sparse). The same object on both sides: :func:`write_answer` puts it in a reply
    frame, :func:`read_answer` takes it out."""

    w: int
    clock: int
    version: int
    plan: int
    busy: int
    lease: int
    flags: int
    held_s: float
    update_norm: float = 0.0
    keys: np.ndarray | None = None   # a sparse reply: the keys of the range changed since the worker's last
    seq: int = 0                     # with CHECKPOINT: the checkpoint the worker's part belongs to
    counted: int = 0                 # samples counted against the budget so far (a schedule's progress)


def write_answer(frame: Frame, a: Answer) -> None:
    """Fill a reply frame's header and meta from an answer (the payload travels apart)."""
    h = frame.header
    h[H.CLOCK], h[H.VERSION], h[H.PLAN], h[H.BUSY] = a.clock, a.version, a.plan, a.busy
    h[H.LEASE], h[H.FLAGS], h[H.SEQ], h[H.COUNTED] = a.lease, a.flags, a.seq, a.counted
    frame.meta[M.HELD_S] = a.held_s
    frame.meta[M.UPDATE_NORM] = a.update_norm


def read_answer(header: np.ndarray, meta: np.ndarray, w: int = 0) -> Answer:
    """The answer a reply frame's header and meta carry (its keys, if sparse, come with the payload)."""
    return Answer(w, int(header[H.CLOCK]), int(header[H.VERSION]), int(header[H.PLAN]), int(header[H.BUSY]),
                  int(header[H.LEASE]), int(header[H.FLAGS]), float(meta[M.HELD_S]), float(meta[M.UPDATE_NORM]),
                  None, int(header[H.SEQ]), int(header[H.COUNTED]))
