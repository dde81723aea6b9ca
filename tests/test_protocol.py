"""Frame layout: exact integer headers next to float64 payloads in one buffer."""
import numpy as np

from mpikanel.engine.messages import HEADER_INTS, META_FLOATS, Flag, Frame, H, M, Tag, frame_nbytes


def test_frame_views_share_one_buffer():
    f = Frame.allocate(5)
    assert f.buf.nbytes == frame_nbytes(5) == 8 * (HEADER_INTS + META_FLOATS + 5)
    f.header[H.CLOCK] = 2**53 + 1          # exact beyond float precision
    f.meta[M.STEP_S] = 0.25
    f.payload[:] = np.arange(5)
    g = Frame.allocate(5)
    g.buf[:] = f.buf                        # what MPI.BYTE transfer does
    assert g.header[H.CLOCK] == 2**53 + 1
    assert g.meta[M.STEP_S] == 0.25
    assert list(g.payload) == [0, 1, 2, 3, 4]


def test_flags_and_tags_distinct():
    f = Frame.allocate(0)
    f.header[H.FLAGS] = Flag.DONE | Flag.HAS_DELTA
    assert f.has(Flag.DONE) and f.has(Flag.HAS_DELTA) and not f.has(Flag.STOP)
    assert len({t.value for t in Tag}) == len(Tag)
    assert len({fl.value for fl in Flag}) == len(Flag)
