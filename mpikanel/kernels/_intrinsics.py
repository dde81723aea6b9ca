"""Low-level numba intrinsics shared by the kernels.

numba's on-disk cache of a kernel is keyed on the kernel's own source file; ``warmup`` empties the
cache when any kernel source (this file too) changed (``drop_stale_cache``).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# Software prefetch distance (rows ahead) for minibatches that gather random rows of X:
# measured on a 200k x 100 float32 shuffled epoch, 8 rows ahead took ~6 -> ~17 M samples/s.
PREFETCH_ROWS = 8
# Cap of cache lines prefetched per row; the hardware stream prefetcher covers the rest of long rows.
_MAX_LINES = 16
_LINE = 64


@intrinsic
def prefetch_row(typingctx, X, i):
    """Hint the CPU to pull the first cache lines of row i of a 2-D array into cache (no fault, no effect on results)."""
    if not (isinstance(X, types.Array) and X.ndim == 2 and isinstance(i, types.Integer)):
        return None
    sig = types.void(X, i)

    def codegen(context, builder, signature, args):
        aryty, ity = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        row = context.cast(builder, args[1], ity, types.intp)
        zero = context.get_constant(types.intp, 0)
        shape = cgutils.unpack_tuple(builder, ary.shape, 2)
        strides = cgutils.unpack_tuple(builder, ary.strides, 2)
        ptr = cgutils.get_item_pointer2(
            context, builder, ary.data, shape, strides, aryty.layout, [row, zero]
        )
        i8p = ir.IntType(8).as_pointer()
        bptr = builder.bitcast(ptr, i8p)
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        itemsize = context.get_constant(types.intp, aryty.dtype.bitwidth // 8)
        nbytes = builder.mul(shape[1], itemsize)
        cap = context.get_constant(types.intp, _MAX_LINES * _LINE)
        nbytes = builder.select(builder.icmp_signed("<", nbytes, cap), nbytes, cap)
        step = context.get_constant(types.intp, _LINE)
        # args: address, rw=0 (read), locality=3 (keep in all levels), cache type=1 (data)
        flags = [ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)]
        with cgutils.for_range_slice(builder, zero, nbytes, step, inc=True) as (off, _):
            builder.call(fn, [builder.gep(bptr, [off]), *flags])
        # The row need not start on a line boundary: also touch its last prefetched byte.
        last = builder.sub(nbytes, context.get_constant(types.intp, 1))
        with builder.if_then(builder.icmp_signed(">", nbytes, zero)):
            builder.call(fn, [builder.gep(bptr, [last]), *flags])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def prefetch_span(typingctx, a, lo, hi):
    """Hint the CPU to pull elements [lo, hi) of a 1-D array into cache (first 16 lines; no fault, no effect on results)."""
    if not (isinstance(a, types.Array) and a.ndim == 1 and isinstance(lo, types.Integer)
            and isinstance(hi, types.Integer)):
        return None
    sig = types.void(a, lo, hi)

    def codegen(context, builder, signature, args):
        aryty, loty, hity = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        lo_v = context.cast(builder, args[1], loty, types.intp)
        hi_v = context.cast(builder, args[2], hity, types.intp)
        i8p = ir.IntType(8).as_pointer()
        base = builder.bitcast(ary.data, i8p)
        itemsize = context.get_constant(types.intp, aryty.dtype.bitwidth // 8)
        zero = context.get_constant(types.intp, 0)
        n = builder.sub(hi_v, lo_v)
        n = builder.select(builder.icmp_signed("<", n, zero), zero, n)
        nbytes = builder.mul(n, itemsize)
        cap = context.get_constant(types.intp, _MAX_LINES * _LINE)
        nbytes = builder.select(builder.icmp_signed("<", nbytes, cap), nbytes, cap)
        start = builder.gep(base, [builder.mul(lo_v, itemsize)])
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        flags = [ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)]
        step = context.get_constant(types.intp, _LINE)
        with cgutils.for_range_slice(builder, zero, nbytes, step, inc=True) as (off, _):
            builder.call(fn, [builder.gep(start, [off]), *flags])
        last = builder.sub(nbytes, context.get_constant(types.intp, 1))
        with builder.if_then(builder.icmp_signed(">", nbytes, zero)):
            builder.call(fn, [builder.gep(start, [last]), *flags])
        return context.get_dummy_value()

    return sig, codegen


def _bitcast(from_kind, from_ty, to_ty, llvm_to):
    """An intrinsic reinterpreting the 64 bits of a from_kind scalar (cast to from_ty) as to_ty."""

    def typer(typingctx, x):
        if not isinstance(x, from_kind):
            return None

        def codegen(context, builder, signature, args):
            return builder.bitcast(context.cast(builder, args[0], signature.args[0], from_ty), llvm_to)

        return to_ty(x), codegen

    return intrinsic(typer)


#: Reinterpret the bits of an int64 as a float64 (no conversion).
int_bits_as_float = _bitcast(types.Integer, types.int64, types.float64, ir.DoubleType())
#: Reinterpret the bits of a float64 as an int64 (no conversion).
float_bits_as_int = _bitcast(types.Float, types.float64, types.int64, ir.IntType(64))
