"""Thread primitives for jitted code (numba intrinsics): atomic loads, stores,
compare-and-swap and add on an int64 array slot, a spin-wait hint, yielding and sleeping,
and arrays over raw addresses.

numba has no atomics on the CPU; these emit LLVM's atomic instructions (seq_cst), so
LLVM neither caches the value in a register nor moves plain loads and stores across
them. `sched_yield` and `usleep` are declared as external C functions, resolved in the
process when the code is loaded (so `cache=True` keeps working, unlike ctypes pointers).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

I32 = ir.IntType(32)
ORDER = "seq_cst"


def _slot(context, builder, arrty, arr, index) -> ir.Value:
    """Pointer to `arr[index]` of an int64 array."""
    data = context.make_array(arrty)(context, builder, arr).data
    return builder.gep(data, [index])


def _check_i64(arr) -> None:
    if not (isinstance(arr, types.Array) and arr.dtype == types.int64):
        raise TypeError("atomics work on int64 arrays")


@intrinsic
def load(typingctx, arr, index):
    """`arr[index]` read atomically."""
    _check_i64(arr)

    def codegen(context, builder, signature, args):
        return builder.load_atomic(_slot(context, builder, signature.args[0], *args),
                                   ORDER, 8)
    return types.int64(arr, index), codegen


@intrinsic
def store(typingctx, arr, index, value):
    """`arr[index] = value` atomically."""
    _check_i64(arr)

    def codegen(context, builder, signature, args):
        value = context.cast(builder, args[2], signature.args[2], types.int64)
        builder.store_atomic(value, _slot(context, builder, signature.args[0], args[0],
                                          args[1]), ORDER, 8)
        return context.get_dummy_value()
    return types.void(arr, index, value), codegen


@intrinsic
def compare_swap(typingctx, arr, index, expected, value):
    """Set `arr[index] = value` if it holds `expected`; whether it did."""
    _check_i64(arr)

    def codegen(context, builder, signature, args):
        ptr = _slot(context, builder, signature.args[0], args[0], args[1])
        expected = context.cast(builder, args[2], signature.args[2], types.int64)
        value = context.cast(builder, args[3], signature.args[3], types.int64)
        pair = builder.cmpxchg(ptr, expected, value, ORDER, ORDER)
        return builder.extract_value(pair, 1)
    return types.boolean(arr, index, expected, value), codegen


@intrinsic
def fetch_add(typingctx, arr, index, value):
    """`arr[index] += value` atomically; the value before."""
    _check_i64(arr)

    def codegen(context, builder, signature, args):
        ptr = _slot(context, builder, signature.args[0], args[0], args[1])
        value = context.cast(builder, args[2], signature.args[2], types.int64)
        return builder.atomic_rmw("add", ptr, value, ORDER)
    return types.int64(arr, index, value), codegen


def _host_is_x86() -> bool:
    import platform
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


_X86 = _host_is_x86()


@intrinsic
def pause(typingctx):
    """A spin-wait hint (x86 `pause`: lets the sibling hyperthread run, saves power)."""
    def codegen(context, builder, signature, args):
        if _X86:
            builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "pause", "",
                                      side_effect=True), [])
        return context.get_dummy_value()
    return types.void(), codegen


def _extern(builder: ir.IRBuilder, name: str, fnty: ir.FunctionType) -> ir.Function:
    return cgutils.get_or_insert_function(builder.module, fnty, name)


@intrinsic
def sched_yield(typingctx):
    """Give the core to another runnable thread, if any (POSIX sched_yield)."""
    def codegen(context, builder, signature, args):
        builder.call(_extern(builder, "sched_yield", ir.FunctionType(I32, [])), [])
        return context.get_dummy_value()
    return types.void(), codegen


@intrinsic
def usleep(typingctx, microseconds):
    """Sleep about `microseconds` (POSIX usleep)."""
    def codegen(context, builder, signature, args):
        us = context.cast(builder, args[0], signature.args[0], types.uint32)
        builder.call(_extern(builder, "usleep", ir.FunctionType(I32, [I32])), [us])
        return context.get_dummy_value()
    return types.void(microseconds), codegen


def _pointer_intrinsic(dtype):
    """An intrinsic `address -> CPointer(dtype)` (for `numba.carray`)."""
    def typer(typingctx, address):
        def codegen(context, builder, signature, args):
            target = context.get_value_type(dtype).as_pointer()
            return builder.inttoptr(args[0], target)
        return types.CPointer(dtype)(address), codegen
    typer.__name__ = "pointer_" + str(dtype)
    return intrinsic(typer)


# address -> typed pointer, for `numba.carray(pointer, shape)`
u8_at = _pointer_intrinsic(types.uint8)
i8_at = _pointer_intrinsic(types.int8)
i16_at = _pointer_intrinsic(types.int16)
i32_at = _pointer_intrinsic(types.int32)
i64_at = _pointer_intrinsic(types.int64)
f32_at = _pointer_intrinsic(types.float32)
