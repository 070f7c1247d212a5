"""Raw memory access for the numba kernels: loads and stores at an address, a copy between two
addresses (memcpy), and calls of C functions by their address.

The encoder kernel takes every column of a batch as addresses in one int64 array (see
`example`), so one compiled function serves any schema: a tuple or list of numpy arrays
would make numba compile (and cache) one specialization per combination of column types.
The C function is passed by address for the same reason: a ctypes function captured as a
global is baked into the machine code, which numba then cannot cache.

Loads and stores are unaligned (align 1): on x86-64 and ARMv8 these are single instructions.
The caller guarantees every address is inside a live buffer.

The kernel's helpers take addresses and integers only, never arrays: numba counts references
to an array passed to a function, inlined or not, and those atomic increments and decrements
made the per-entry writer about 8x slower (100 ns against 13 ns per int64 entry, measured).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = [
    "c_function",
    "call_u32_of_bytes",
    "copy_memory",
    "load_i64",
    "load_u8",
    "load_u32",
    "store_u8",
    "store_u32",
    "store_u64",
]


def _address(context, builder, value, typ):  # noqa: ANN001, ANN202
    """An integer argument as an i64 address."""
    return context.cast(builder, value, typ, types.int64)


def _addresses(context, builder, signature, args):  # noqa: ANN001, ANN202
    """Every (integer) argument of an intrinsic as an i64 address."""
    return [_address(context, builder, v, t) for v, t in zip(args, signature.args, strict=True)]


def _pointer(context, builder, value, typ, bits: int):  # noqa: ANN001, ANN202
    addr = _address(context, builder, value, typ)
    return builder.inttoptr(addr, ir.IntType(bits).as_pointer())


def _load(bits: int, result: types.Integer) -> object:
    @intrinsic
    def load(typingctx, addr):  # noqa: ANN001, ANN202
        if not isinstance(addr, types.Integer):
            return None

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            ptr = _pointer(context, builder, args[0], signature.args[0], bits)
            return builder.load(ptr, align=1)

        return result(addr), codegen

    return load


def _store(bits: int) -> object:
    @intrinsic
    def store(typingctx, addr, value):  # noqa: ANN001, ANN202
        if not (isinstance(addr, types.Integer) and isinstance(value, types.Integer)):
            return None

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            v = context.cast(builder, args[1], signature.args[1], types.uint64)
            if bits < 64:
                v = builder.trunc(v, ir.IntType(bits))
            ptr = _pointer(context, builder, args[0], signature.args[0], bits)
            builder.store(v, ptr, align=1)
            return context.get_dummy_value()

        return types.none(addr, value), codegen

    return store


load_u8 = _load(8, types.uint8)
load_u32 = _load(32, types.uint32)
load_i64 = _load(64, types.int64)
store_u8 = _store(8)
store_u32 = _store(32)
store_u64 = _store(64)


@intrinsic
def call_u32_of_bytes(typingctx, fn, addr, size):  # noqa: ANN001, ANN201 (numba's typing API)
    """`uint32_t fn(const uint8_t *addr, size_t size)` called through its address `fn`."""
    if not all(isinstance(t, types.Integer) for t in (fn, addr, size)):
        return None

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        fn_addr, data, n = _addresses(context, builder, signature, args)
        i8p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.IntType(32), [i8p, ir.IntType(64)])
        target = builder.inttoptr(fn_addr, fnty.as_pointer())
        return builder.call(target, [builder.inttoptr(data, i8p), n])

    return types.uint32(fn, addr, size), codegen


@intrinsic
def copy_memory(typingctx, dst, src, size):  # noqa: ANN001, ANN201 (numba's typing API)
    """Copy `size` bytes from address `src` to address `dst` (the ranges must not overlap):
    LLVM's memcpy, which calls the C library's. Records gathered into a new order one call
    each copy 1.9-2.7x faster than with a loop of 8-byte loads and stores at 40-350 bytes a
    record, 1.3x at 6-7 KB (bench/copy_bytes.py)."""
    if not all(isinstance(t, types.Integer) for t in (dst, src, size)):
        return None

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        to, start, n = _addresses(context, builder, signature, args)
        i8p = ir.IntType(8).as_pointer()
        cgutils.raw_memcpy(builder, builder.inttoptr(to, i8p), builder.inttoptr(start, i8p), n, 1)
        return context.get_dummy_value()

    return types.none(dst, src, size), codegen


def c_function(result_bits: int, *arg_bits: int, var_arg: bool = False) -> object:
    """An intrinsic `call(fn, args)` that calls the C function at address `fn` with the tuple
    `args` of integers, passed as integers of `arg_bits` bits (a pointer is an address, 64
    bits), its result (of `result_bits` bits) sign-extended to int64: with `read =
    c_function(64, 32, 64, 64)`, `read(fn, (fd, address, size))` calls `ssize_t read(int, void
    *, size_t)`. `var_arg` for a variadic function such as `open`, so the call follows the
    platform's convention for one (on x86-64, the count of vector registers in `al`)."""
    count = len(arg_bits)

    @intrinsic
    def call(typingctx, fn, args):  # noqa: ANN001, ANN202
        if not (isinstance(fn, types.Integer) and isinstance(args, types.BaseTuple)):
            return None
        if len(args) != count or not all(isinstance(t, types.Integer) for t in args):
            return None

        def codegen(context, builder, signature, values):  # noqa: ANN001, ANN202
            target = _address(context, builder, values[0], signature.args[0])
            params = [ir.IntType(bits) for bits in arg_bits]
            given = []
            for k, param in enumerate(params):
                value = builder.extract_value(values[1], k)
                value = _address(context, builder, value, signature.args[1][k])
                given.append(builder.trunc(value, param) if param.width < 64 else value)
            fnty = ir.FunctionType(ir.IntType(result_bits), params, var_arg=var_arg)
            result = builder.call(builder.inttoptr(target, fnty.as_pointer()), given)
            return builder.sext(result, ir.IntType(64)) if result_bits < 64 else result

        return types.int64(fn, args), codegen

    return call
