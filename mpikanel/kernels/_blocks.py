"""Small dense products for the minibatch kernels: BLAS gemm when SciPy is installed, else register-blocked loops.

``blas_product`` runs a product through numba's ``np.dot``, which calls BLAS gemm through
``scipy.linalg.cython_blas`` (SciPy is needed when such a kernel compiles and runs); ``loop_product``
runs the same on the micro-kernels below, with no dependency beyond numba.  ``HAVE_BLAS`` says
whether SciPy is importable; kernels pick their BLAS variant only when it is true.

The MLP step (and the multiclass steps without SciPy) process a minibatch as a few small dense
products (64 x 100 times 100 x 10 and the like).  LLVM's loop vectoriser does poorly on those shapes
from plain numba loops (it vectorises the reduction and pays a horizontal sum per output, or
gathers), so the one micro-kernel they share is written here as an intrinsic over explicit
``<4 x double>`` vectors:

    out[r, c] = beta * out[r, c] + alpha * sum_k A[r, k] * B[k, c]      r < MR, c < ncols <= 4*NV

with A read as scalar broadcasts at any strides (so A or its transpose serves), B read along
contiguous rows (row stride ldb) and out written along contiguous rows; columns past ncols are
masked (AVX-512 / AVX2 masked loads and stores, on a tile's last vector only: the others are
whole), so no tail loop.  MR x NV accumulators live in
registers for the whole k loop.  beta == 0 never reads out (scratch may hold NaN).  Every operand
is float64: float32 data is widened once per minibatch (``gather_rows``).

``gemm(out, A, trans_a, B, alpha, beta)`` tiles a whole product with these micro-kernels.
Results are deterministic for given shapes (fixed order of summation per output).

numba's on-disk cache of a kernel is keyed on the kernel's own source file only; ``warmup`` empties
the cache when any kernel source changed (``drop_stale_cache``), so _linear's and mlp's kernels
do not keep the old code of this file.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._intrinsics import PREFETCH_ROWS, float_bits_as_int, int_bits_as_float, prefetch_row

#: Whether SciPy (whose cython_blas numba's np.dot calls) is installed: found without importing it.
HAVE_BLAS = importlib.util.find_spec("scipy") is not None


def preload_cython_blas() -> None:
    """Import ``scipy.linalg.cython_blas`` alone, before numba asks for it, where SciPy is installed.

    numba imports it when it first compiles or loads a kernel, to learn whether np.dot has BLAS;
    through ``scipy.linalg`` that costs every rank 0.4 s of CPU, where the module by itself costs
    0.1 s (with ``import scipy``). numba and its compiled kernels reach the module through
    ``sys.modules``. Anything unexpected leaves it to numba's own import.
    """
    if not HAVE_BLAS or "scipy.linalg" in sys.modules or "scipy.linalg.cython_blas" in sys.modules:
        return
    try:
        spec = importlib.util.find_spec("scipy")
        linalg = Path(spec.submodule_search_locations[0]) / "linalg"
        path = next(p for p in linalg.glob("cython_blas.*") if p.suffix in (".so", ".pyd"))
        blas = importlib.util.spec_from_file_location("scipy.linalg.cython_blas", path)
        module = importlib.util.module_from_spec(blas)
        blas.loader.exec_module(module)
    except Exception:  # noqa: BLE001 - an unusual SciPy: numba imports it the usual way
        return
    sys.modules.setdefault("scipy.linalg.cython_blas", module)

VW = 4          # doubles per vector (256-bit: two FMA pipes on AVX2 and AVX-512 machines alike)
NV_MAX = 4      # vectors per tile row: tiles are up to MR_MAX x 16 columns
MR_MAX = 4      # rows per tile


def _vec_ptr(builder, base, offset, vty):
    """Pointer to a vector of doubles at base[offset] (base a double*)."""
    return builder.bitcast(builder.gep(base, [offset]), vty.as_pointer())


def _make_tile(MR: int, NV: int):
    """The MR x (VW*NV) micro-kernel intrinsic."""

    @intrinsic
    def tile(typingctx, out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta):
        arrs = (out, A, B)
        if not all(isinstance(a, types.Array) and a.ndim == 1 and a.dtype == types.float64 for a in arrs):
            return None
        sig = types.void(out, types.intp, types.intp, A, types.intp, types.intp, types.intp, B, types.intp,
                         types.intp, types.intp, types.intp, types.float64, types.float64)

        def codegen(context, builder, signature, args):
            (out_v, oo_v, ldo_v, a_v, ao_v, sam_v, sak_v, b_v, bo_v, ldb_v, k_v, nc_v, al_v, be_v) = args
            aty, bty, oty = signature.args[3], signature.args[7], signature.args[0]
            pa = context.make_array(aty)(context, builder, a_v).data
            pb = context.make_array(bty)(context, builder, b_v).data
            po = context.make_array(oty)(context, builder, out_v).data
            dbl = ir.DoubleType()
            vty = ir.VectorType(dbl, VW)
            i1v = ir.VectorType(ir.IntType(1), VW)
            i64 = ir.IntType(64)
            i32 = ir.IntType(32)
            i64v = ir.VectorType(i64, VW)
            mod = builder.module
            fma = cgutils.get_or_insert_function(mod, ir.FunctionType(vty, [vty, vty, vty]), f"llvm.fma.v{VW}f64")
            mload = cgutils.get_or_insert_function(
                mod, ir.FunctionType(vty, [vty.as_pointer(), i32, i1v, vty]), f"llvm.masked.load.v{VW}f64.p0v{VW}f64")
            mstore = cgutils.get_or_insert_function(
                mod, ir.FunctionType(ir.VoidType(), [vty, vty.as_pointer(), i32, i1v]),
                f"llvm.masked.store.v{VW}f64.p0v{VW}f64")
            zero_v = ir.Constant(vty, [0.0] * VW)
            align = ir.Constant(i32, 8)
            lanes = ir.Constant(i64v, list(range(VW)))

            def splat(builder, x, ty):
                und = ir.Constant(ir.VectorType(ty, VW), ir.Undefined)
                v = builder.insert_element(und, x, ir.Constant(i32, 0))
                return builder.shuffle_vector(v, und, ir.Constant(ir.VectorType(i32, VW), [0] * VW))

            nc_splat = splat(builder, nc_v, i64)
            masks = []
            for v in range(NV):
                idx = builder.add(lanes, ir.Constant(i64v, [v * VW] * VW))
                masks.append(builder.icmp_signed("<", idx, nc_splat))
            def load(ptr, v):
                # only the last vector can cross ncols (the tile has ceil(ncols / VW) vectors)
                if v < NV - 1:
                    return builder.load(ptr, align=8)
                return builder.call(mload, [ptr, align, masks[v], zero_v])

            def store(val, ptr, v):
                if v < NV - 1:
                    builder.store(val, ptr, align=8)
                else:
                    builder.call(mstore, [val, ptr, align, masks[v]])

            accs = [[cgutils.alloca_once_value(builder, zero_v) for _ in range(NV)] for _ in range(MR)]
            with cgutils.for_range(builder, k_v) as loop:
                k = loop.index
                brow = builder.add(bo_v, builder.mul(k, ldb_v))
                bvals = [load(_vec_ptr(builder, pb, builder.add(brow, ir.Constant(i64, v * VW)), vty), v)
                         for v in range(NV)]
                acol = builder.add(ao_v, builder.mul(k, sak_v))
                for r in range(MR):
                    aoff = builder.add(acol, builder.mul(ir.Constant(i64, r), sam_v))
                    a = splat(builder, builder.load(builder.gep(pa, [aoff])), dbl)
                    for v in range(NV):
                        acc = accs[r][v]
                        builder.store(builder.call(fma, [a, bvals[v], builder.load(acc)]), acc)
            al = splat(builder, al_v, dbl)
            be = splat(builder, be_v, dbl)
            beta_zero = builder.fcmp_ordered("==", be_v, ir.Constant(dbl, 0.0))
            for r in range(MR):
                orow = builder.add(oo_v, builder.mul(ir.Constant(i64, r), ldo_v))
                for v in range(NV):
                    ptr = _vec_ptr(builder, po, builder.add(orow, ir.Constant(i64, v * VW)), vty)
                    scaled = builder.fmul(al, builder.load(accs[r][v]))
                    with builder.if_else(beta_zero) as (then, otherwise):
                        with then:
                            store(scaled, ptr, v)
                        with otherwise:
                            store(builder.call(fma, [be, load(ptr, v), scaled]), ptr, v)
            return context.get_dummy_value()

        return sig, codegen

    return tile


_TILES = {(m, v): _make_tile(m, v) for m in range(1, MR_MAX + 1) for v in range(1, NV_MAX + 1)}
_T11 = _TILES[(1, 1)]
_T12 = _TILES[(1, 2)]
_T13 = _TILES[(1, 3)]
_T14 = _TILES[(1, 4)]
_T21 = _TILES[(2, 1)]
_T22 = _TILES[(2, 2)]
_T23 = _TILES[(2, 3)]
_T24 = _TILES[(2, 4)]
_T31 = _TILES[(3, 1)]
_T32 = _TILES[(3, 2)]
_T33 = _TILES[(3, 3)]
_T34 = _TILES[(3, 4)]
_T41 = _TILES[(4, 1)]
_T42 = _TILES[(4, 2)]
_T43 = _TILES[(4, 3)]
_T44 = _TILES[(4, 4)]


@njit(cache=True, fastmath=True, nogil=True, inline="always")
def _tile(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta, rows):
    """One tile of `rows` (1..4) rows and ncols (1..16) columns."""
    nv = (ncols + VW - 1) // VW
    if nv == 1:
        if rows == 4:
            _T41(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta)
        elif rows == 3:
            _T31(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta)
        elif rows == 2:
            _T21(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta)
        else:
            _T11(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta)
    elif nv == 2:
        if rows == 4:
            _T42(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta)
        elif rows == 3:
            _T32(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta)
        elif rows == 2:
            _T22(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta)
        else:
            _T12(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta)
    elif nv == 3:
        if rows == 4:
            _T43(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta)
        elif rows == 3:
            _T33(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta)
        elif rows == 2:
            _T23(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta)
        else:
            _T13(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta)
    else:
        if rows == 4:
            _T44(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta)
        elif rows == 3:
            _T34(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta)
        elif rows == 2:
            _T24(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta)
        else:
            _T14(out, oo, ldo, A, ao, sam, sak, B, bo, ldb, K, ncols, alpha, beta)


@njit(cache=True, fastmath=True, nogil=True)
def gemm(out, A, trans_a, B, alpha, beta):
    """out = beta*out + alpha * op(A) @ B, op(A) = A.T if trans_a else A; all float64 C-contiguous 2-D.

    beta == 0 never reads out.  Shapes: op(A) (M, K), B (K, N), out (M, N).
    """
    if trans_a:
        K, M = A.shape
        sam, sak = 1, M
    else:
        M, K = A.shape
        sam, sak = K, 1
    N = B.shape[1]
    if B.shape[0] != K or out.shape[0] != M or out.shape[1] != N:
        raise ValueError("gemm: shapes do not match")
    if M == 0 or N == 0:
        return
    a1 = A.reshape(A.size)
    b1 = B.reshape(B.size)
    o1 = out.reshape(out.size)
    width = NV_MAX * VW
    for n0 in range(0, N, width):
        nc = min(width, N - n0)
        for m0 in range(0, M, MR_MAX):
            rows = min(MR_MAX, M - m0)
            _tile(o1, m0 * N + n0, N, a1, m0 * sam, sam, sak, b1, n0, N, K, nc, alpha, beta, rows)


@njit(cache=True, fastmath=True, nogil=True)
def _dot(out, A, trans_a, B):
    """out = op(A) @ B through numba's np.dot (BLAS gemm; gemv when a side is one row or column)."""
    if trans_a:
        np.dot(A.T, B, out)
    else:
        np.dot(A, B, out)


@njit(cache=True, fastmath=True, nogil=True)
def blas_product(out, A, trans_a, B, accumulate):
    """out = op(A) @ B, or out += op(A) @ B when accumulate, on BLAS; float64 C-contiguous 2-D, shapes as gemm's."""
    if not accumulate:
        _dot(out, A, trans_a, B)
        return
    tmp = np.empty_like(out)   # gemm through np.dot has no beta: only batches of several row blocks get here
    _dot(tmp, A, trans_a, B)
    o = out.reshape(out.size)
    t = tmp.reshape(tmp.size)
    for i in range(o.shape[0]):
        o[i] += t[i]


@njit(cache=True, fastmath=True, nogil=True)
def loop_product(out, A, trans_a, B, accumulate):
    """blas_product on the register-blocked micro-kernels (no SciPy needed)."""
    gemm(out, A, trans_a, B, 1.0, 1.0 if accumulate else 0.0)


@njit(cache=True, fastmath=True, nogil=True)
def gather_rows(X, idx, Xb):
    """Xb[k, :] = X[idx[k], :] widened to float64 (Xb has at least len(idx) rows)."""
    d = X.shape[1]
    n = idx.shape[0]
    for k in range(min(PREFETCH_ROWS, n)):
        prefetch_row(X, idx[k])
    for k in range(n):
        if k + PREFETCH_ROWS < n:
            prefetch_row(X, idx[k + PREFETCH_ROWS])
        i = idx[k]
        for j in range(d):
            Xb[k, j] = X[i, j]


#: Rows per block of the dense steps: a minibatch up to this size is one block (fused update);
#: larger ones are processed in blocks with the gradient accumulated. Scratch per row: row_len doubles.
BLOCK_ROWS = 256
#: Cap of the row blocks' scratch (doubles): wide data gets fewer rows per block.
BLOCK_DOUBLES = 1 << 18


def scratch_rows(row_len: int) -> int:
    """Rows of the block a scratch buffer is sized for, at row_len doubles per row."""
    return max(1, min(BLOCK_ROWS, BLOCK_DOUBLES // max(1, row_len)))


@njit(cache=True, nogil=True, inline="always")
def block_rows(avail, row_len):
    """Rows per block that fit in avail doubles of scratch at row_len doubles per row (at least 1)."""
    return max(1, min(BLOCK_ROWS, avail // row_len))


_LOG2E = 1.4426950408889634
_LN2_HI = 6.93145751953125e-1
_LN2_LO = 1.42860682030941723212e-6
#: exp's argument floor: below it 2^n would be subnormal; exp(-708) ~ 3e-308 stands in for smaller values
EXP_MIN = -708.0
EXP_MAX = 709.0
#: 1.5 * 2^52: adding it to an integral double |n| < 2^51 leaves n in the low bits of its int64 image
_SHIFTER = 6755399441055744.0
#: exp_inplace's unroll: independent polynomial chains in flight (Horner's chain is latency-bound)
EXP_UNROLL = 16


# No reassociation here: the Cody-Waite reduction x - n*hi - n*lo must be evaluated as written.
@njit(cache=True, fastmath={"nsz", "contract", "arcp"}, nogil=True, inline="always")
def exp_fast(x):
    """exp(x) to about 1 ulp, vectorisable (no libm call); x is clamped to [EXP_MIN, EXP_MAX]."""
    x = min(max(x, EXP_MIN), EXP_MAX)
    n = np.floor(x * _LOG2E + 0.5)   # a float: math.floor's int64 would not vectorise on AVX2
    r = x - n * _LN2_HI
    r = r - n * _LN2_LO
    p = 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    # 2^n from n's bits (n in [-1022, 1023]): the shifted low 12 bits are n + 1023, the rest shift out
    return p * int_bits_as_float((float_bits_as_int(n + _SHIFTER) + 1023) << 52)


@njit(cache=True, fastmath={"nsz", "contract", "arcp"}, nogil=True)
def exp_inplace(a):
    """a[:] = exp_fast(a[:]) over a 1-D float64 array."""
    n = a.shape[0]
    m = n - n % EXP_UNROLL
    for i in range(0, m, EXP_UNROLL):
        for j in range(EXP_UNROLL):
            a[i + j] = exp_fast(a[i + j])
    for i in range(m, n):
        a[i] = exp_fast(a[i])
