# SPDX-License-Identifier: Apache-2.0
"""Triton kernels checked without a GPU: Triton's interpreter (``TRITON_INTERPRET=1``) runs a
``@triton.jit`` kernel on CPU tensors, one program at a time, and ``TritonBackend`` makes an
adapter whose ops launch such kernels into a backend for ``mlarope.fuzz`` and ``mlarope.check``::

    from mlarope import triton as mt
    mt.interpreter()                       # before the kernels' module is imported
    backend = mt.TritonBackend(MyAdapter())
    mlarope.fuzz(backend, seconds=60)

What it adds to a plain Python backend:

- **Every autotune config is a variant.** A GPU's autotuner keeps the config that ran fastest,
  so a config-dependent bug shows on some processes and not others. Here each case runs once
  per config of the adapter's autotuned kernels (``adapter.kernels()``), the config chosen
  rather than timed; the summary, ``fuzz.json`` and the report count cases and failures per
  variant, and a failure's directory records its variant, which ``mlarope.check`` selects again.
- **Memory the kernel may reach is guarded.** The adapter hands the kernel CPU tensors over the
  harness's own buffers (``torch_view``): the interpreter loads and stores at the tensors' real
  addresses, so a store past a tensor lands in the harness's guard and fails the bounds check,
  and a load of a guard reads its NaN pattern into the values. Tensors the adapter or the
  library's wrapper allocates during a call (``scratch``; ``torch.empty``, ``empty_like`` and
  ``Tensor.new_empty`` while the call runs) sit between guards of their own, checked after the
  call: a store into one fails the case by name.
- **A per-call time limit**, checked before each program of the grid: a kernel that does not
  finish fails its case (``TimeoutError``) rather than stalling the run. A single program
  that never returns is not caught.
- **Versions** of torch and Triton (and what the adapter reports) go into ``fuzz.json``.
- **Programs in any order**: ``with_order_seed`` runs each launch's programs in a drawn order
  (the order_independence check), as a GPU may.
- **Every config the same bits**: a call of an op whose result cannot depend on tiling runs
  under a second config too and must give identical bits (``config_bitwise``).
- **Races** (the ``races`` check; ``races=False`` leaves it out, ``race_check`` wraps any
  code): ``with_races()`` is the same backend recording each launch's global accesses and
  checking them against the rules of ``mlarope._races`` when it ends.

- **Arithmetic as an sm_90 GPU's** (``mlarope._gpu_float``): bf16 tiles rounded to nearest
  even per operation and converted with ``cvt.rn`` (the interpreter alone computes on the raw
  16-bit patterns and truncates); multiply-adds contracted into one rounding as Triton's
  ``enable_fp_fusion`` does (``fp_fusion=False``: as written, two roundings).

Limits, by design of running in-process: a store past a guard (more than ``GUARD_BYTES`` past
a scratch tensor) corrupts this process's memory, and a load of an unmapped address crashes it;
run a campaign in a subprocess (the adapters' tests do) so that a crash fails one test.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import sys
import time
import warnings
import zlib

import numpy as np

from . import _gpu_float

#: Triton releases whose interpreter this module's shims were written against and tested with.
KNOWN_TRITON = ("3.6.0", "3.9.0")
#: Bytes of guard before and after every scratch tensor.
GUARD_BYTES = 4096
#: An access further than this from the storage of every tensor a launch was given is wild:
#: it fails the call before it is made. Nearer ones land in the harness's guards (checked
#: there, NaN when loaded), so the bounds check names the tensor.
WILD_BYTES = 1 << 20


class UnknownTriton(RuntimeError):
    """A Triton release the shims do not know: they patch the interpreter's internals."""


class GuardWritten(AssertionError):
    """A kernel stored into the guard of a tensor allocated during its call."""


class WildAccess(AssertionError):
    """A kernel loaded or stored further than ``WILD_BYTES`` from every tensor it was given:
    on a GPU an illegal memory access (or another allocation's bytes); here it is stopped
    before it is made."""


class ConfigsDisagree(AssertionError):
    """Two autotune configs gave different bits for an op whose result cannot depend on tiling."""


def _writable_alias(a: np.ndarray) -> np.ndarray:
    """A writable array over the same memory as ``a`` (read-only or not)."""
    import ctypes

    if a.flags.writeable or a.size == 0:
        return a
    lo, hi = np.byte_bounds(a)
    memory = (ctypes.c_char * (hi - lo)).from_address(lo)
    start = a.__array_interface__["data"][0] - lo
    return np.ndarray(a.shape, a.dtype, buffer=memory, offset=start, strides=a.strides)


def _require_same_bits(first: dict, second: dict, first_config: str, second_config: str):
    """Raise ConfigsDisagree at the first element (in each array's index order) whose bits
    differ between the two configs' outputs."""
    for name in sorted(first):
        a, b = first[name], np.ascontiguousarray(second[name])
        width = a.dtype.itemsize
        bits = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width]
        ua, ub = a.reshape(-1).view(bits), b.reshape(-1).view(bits)
        differ = np.flatnonzero(ua != ub)
        if differ.size:
            k = int(differ[0])
            index = tuple(int(i) for i in np.unravel_index(k, a.shape))
            raise ConfigsDisagree(
                f"configs: {first_config} and {second_config} give different bits for "
                f"'{name}' at {index}: {a.reshape(-1)[k]!r} (0x{int(ua[k]):0{2 * width}x}) vs "
                f"{b.reshape(-1)[k]!r} (0x{int(ub[k]):0{2 * width}x}), {differ.size} elements "
                "in all; the op's result cannot depend on how a kernel tiles it"
            )


def interpreter():
    """Triton, imported with its interpreter on: returns the ``triton`` module.

    Sets ``TRITON_INTERPRET=1`` (Triton reads it when its modules are imported and its kernels
    decorated), so call it before importing the kernels' module. Applies the one shim torch 1.13
    needs (``Tensor.untyped_storage``, which the interpreter uses to find a tensor's memory).
    Raises ``UnknownTriton`` for a release not in ``KNOWN_TRITON``, and RuntimeError when Triton
    was already imported without the interpreter.
    """
    already = "triton" in sys.modules
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton

    if already and not triton.knobs.runtime.interpret:
        raise RuntimeError(
            "triton was imported before mlarope.triton.interpreter(): its kernels are compiled "
            "for a GPU; call interpreter() first, or set TRITON_INTERPRET=1 in the environment"
        )
    if triton.__version__ not in KNOWN_TRITON:
        raise UnknownTriton(
            f"Triton {triton.__version__}: mlarope.triton's interpreter shims know "
            f"{', '.join(KNOWN_TRITON)}; pin one of those (ci/python-test.sh installs it)"
        )
    if not hasattr(torch.Tensor, "untyped_storage"):  # torch < 2.0
        torch.Tensor.untyped_storage = lambda self: self.storage().untyped()
    _install_program_hook(triton)
    from triton.runtime import interpreter as interp

    _gpu_float.install(interp.interpreter_builder, triton.language, interp.TensorHandle)
    _install_int1_splat(interp.interpreter_builder, triton.language, interp.TensorHandle)
    return triton


def _install_int1_splat(builder, tl, TensorHandle) -> None:
    """A scalar comparison spread over a block is an int1 block, as compiled Triton makes it.

    The interpreter keeps a comparison's result in its operands' NumPy type (``pid < n`` of two
    i32 is an int32 handle holding 0 and 1) and its splat fills the block in that type, so
    ``tl.load(p + offsets, mask=pid < n)`` gets an int32 mask, which its load refuses ("mask
    has unsupported dtype"); a GPU compiles the mask as i1 and runs the kernel."""
    if getattr(builder, "_mlarope_int1_splat", False):
        return
    splat = builder.create_splat

    def create_splat(ret_ty, arg):
        out = splat(ret_ty, arg)
        if ret_ty.scalar == tl.int1 and out.data.dtype != np.bool_:
            return TensorHandle(out.data.astype(np.bool_), tl.int1)
        return out

    builder.create_splat = create_splat
    builder._mlarope_int1_splat = True


_TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def torch_view(a: np.ndarray, dtype: str):
    """A CPU tensor over the same memory as a harness NumPy view, with its shape and strides.

    ``dtype`` is the call's name for it ("f32", "f16", "bf16": bf16 arrives as uint16 bits).
    Inputs are read-only views: the tensor is writable, and the immutability check catches a
    kernel that writes one.
    """
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch warns on read-only arrays
        if dtype == "bf16":
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(a)


def reserved(shape, dtype: str = "f32"):
    """A CPU tensor of ``shape`` over anonymous memory mapped lazily (``MAP_NORESERVE``): only
    the pages a kernel touches cost memory, so views whose offsets pass 2^31 elements fit in
    megabytes. Unmapped when its last view goes. Its bytes start as zeros."""
    import mmap

    np_dtype = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}[dtype]
    count = int(np.prod(shape, dtype=np.int64))
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0x4000)
    memory = mmap.mmap(-1, max(1, count * np.dtype(np_dtype).itemsize), flags=flags)
    return torch_view(np.frombuffer(memory, dtype=np_dtype, count=count), dtype).view(*shape)


def values_of(a: np.ndarray, dtype: str) -> np.ndarray:
    """The values of a harness array of the call's ``dtype`` as floats: bf16, which arrives as
    its uint16 bit patterns, widened to f32 (exactly); f32 and f16 as they are."""
    return _gpu_float.bf16_to_f32(a) if dtype == "bf16" else a


# ---- guarded scratch ---------------------------------------------------------------------------

_live_scratch: list | None = None  # [(buffer, first, count, name)] while a guarded call runs


def scratch(shape, dtype, name: str = "scratch"):
    """A contiguous, uninitialised CPU tensor between two guards of ``GUARD_BYTES`` (NaN for
    floating dtypes, 0xA5 bytes otherwise), checked when the guarded call ends."""
    import torch

    dtype = getattr(torch, _TORCH_DTYPES.get(dtype, dtype)) if isinstance(dtype, str) else dtype
    shape = tuple(int(n) for n in shape)
    count = int(np.prod(shape, dtype=np.int64))
    allocate = _original_empty or torch.empty  # not the guarded stand-in that calls scratch
    guard = -(-GUARD_BYTES // allocate(0, dtype=dtype).element_size())
    buffer = allocate(count + 2 * guard, dtype=dtype)
    if dtype.is_floating_point:
        buffer.fill_(float("nan"))
    else:
        buffer.view(torch.uint8).fill_(0xA5)
    if _live_scratch is not None:
        _live_scratch.append((buffer, guard, count, name, buffer.clone()))
    tensor = buffer[guard : guard + count].view(shape)
    if _race_tensors is not None:
        _race_tensors[f"{name} #{len(_race_tensors)}"] = _byte_range(tensor)
    return tensor


def _check_guards(allocated) -> None:
    import torch

    for buffer, first, count, name, pattern in allocated:
        for lo, hi, where in ((0, first, "before"), (first + count, buffer.numel(), "after")):
            written = buffer[lo:hi].view(torch.uint8) != pattern[lo:hi].view(torch.uint8)
            if bool(written.any()):
                offsets = written.nonzero().flatten()
                raise GuardWritten(
                    f"the kernel stored into the guard {where} tensor '{name}' "
                    f"({int(written.sum())} bytes, {int(offsets[0])}..{int(offsets[-1])} bytes "
                    f"into the {(hi - lo) * buffer.element_size()}-byte guard)"
                )


_original_empty = None  # torch.empty itself, while _guarded_allocations has replaced it


@contextlib.contextmanager
def _guarded_allocations():
    """While the body runs, ``torch.empty``, ``torch.empty_like`` and ``Tensor.new_empty`` of
    CPU tensors return guarded scratch; on exit every guard of the call is checked."""
    global _live_scratch, _original_empty
    import torch

    originals = (torch.empty, torch.empty_like, torch.Tensor.new_empty)

    def on_cpu(device) -> bool:  # None, "cpu", torch.device("cpu")
        return device is None or torch.device(device).type == "cpu"

    def empty(*size, dtype=None, device=None, **kwargs):
        if not on_cpu(device) or kwargs.get("out") is not None:
            return originals[0](*size, dtype=dtype, device=device, **kwargs)
        shape = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
        return scratch(shape, dtype or torch.get_default_dtype(), "torch.empty")

    def empty_like(t, *, dtype=None, device=None, **kwargs):
        if not on_cpu(device) or t.device.type != "cpu":
            return originals[1](t, dtype=dtype, device=device, **kwargs)
        return scratch(t.shape, dtype or t.dtype, "torch.empty_like")

    def new_empty(self, *size, dtype=None, device=None, **kwargs):
        if not on_cpu(device) or self.device.type != "cpu":
            return originals[2](self, *size, dtype=dtype, device=device, **kwargs)
        shape = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
        return scratch(shape, dtype or self.dtype, "Tensor.new_empty")

    _live_scratch, _original_empty = [], originals[0]
    torch.empty, torch.empty_like, torch.Tensor.new_empty = empty, empty_like, new_empty
    try:
        yield
        _check_guards(_live_scratch)
    finally:
        torch.empty, torch.empty_like, torch.Tensor.new_empty = originals
        _live_scratch = _original_empty = None


# ---- the per-call time limit, the programs' order and the race record ------------------------

_deadline: float | None = None
_order_seed: int | None = None  # programs of each launch in an order drawn from it; None: in order
_launches = 0  # launches run under the present seed: each draws its own order
_permutation = None  # the present launch's order: step -> program, flat
_race_tensors: dict | None = None  # name -> [lo, hi) bytes, while launches are race-checked
_launch = None  # the present launch's accesses (mlarope._races.LaunchRecord)


def _install_program_hook(triton) -> None:
    """Hooks into the interpreter's one builder, through which every program's grid index and
    every global access go: the call's deadline is checked before each program, the programs
    run in a drawn order when ``_order_seed`` is set, and while ``_race_tensors`` is set each
    launch's accesses are recorded and checked for races when it ends (``mlarope._races``)."""
    from triton.runtime import interpreter as interp

    builder = interp.interpreter_builder
    if getattr(builder, "_mlarope_hooked", False):
        return
    set_grid_idx, set_grid_dim = builder.set_grid_idx, builder.set_grid_dim

    def grid_dim(nx, ny, nz):
        global _permutation, _launches
        _permutation = None
        if _order_seed is not None:
            _launches += 1
            rng = np.random.default_rng([_order_seed, _launches])
            _permutation = rng.permutation(nx * ny * nz)
        return set_grid_dim(nx, ny, nz)

    def grid_idx(x, y, z):
        if _deadline is not None and time.monotonic() > _deadline:
            raise TimeoutError("the kernel ran past the per-call time limit")
        _, ny, nz = builder.grid_dim
        step = (x * ny + y) * nz + z
        if _permutation is not None:
            program = int(_permutation[step])
            x, y, z = program // (ny * nz), (program // nz) % ny, program % nz
        if _launch is not None:
            _launch.start_program((x, y, z), step)
        return set_grid_idx(x, y, z)

    builder.set_grid_dim, builder.set_grid_idx = grid_dim, grid_idx
    _install_access_hooks(builder, interp)
    builder._mlarope_hooked = True


def _element_bytes(ptrs) -> int:
    return max(1, ptrs.get_element_ty().primitive_bitwidth // 8)


_storages: list = []  # the present launch's tensor arguments: (name, first byte, end byte)
_kernel_name = ""


def _storage_ranges(names_and_args) -> list:
    """(name, lo, hi) of the storage of every tensor argument."""
    ranges = []
    for name, arg in names_and_args:
        if hasattr(arg, "data_ptr") and hasattr(arg, "untyped_storage"):
            storage = arg.untyped_storage()
            lo = int(storage.data_ptr())
            ranges.append((name, lo, lo + int(storage.nbytes())))
    return ranges


def _check_wild(kind: str, ptrs, mask) -> None:
    """Raise WildAccess for the first active address further than WILD_BYTES from every
    tensor argument's storage."""
    if not _storages:
        return
    addresses = np.asarray(ptrs.data, dtype=np.uint64).reshape(-1)
    if mask is not None:
        addresses = addresses[np.broadcast_to(np.asarray(mask.data), ptrs.data.shape).reshape(-1)]
    if addresses.size == 0:
        return
    first, last = int(addresses.min()), int(addresses.max())
    if any(lo - WILD_BYTES <= first and last < hi + WILD_BYTES for _, lo, hi in _storages):
        return  # the usual tile: all of it near one tensor
    near = np.zeros(addresses.size, dtype=bool)
    for _, lo, hi in _storages:
        near |= (addresses + np.uint64(WILD_BYTES) >= np.uint64(lo)) & (
            addresses < np.uint64(hi + WILD_BYTES)
        )
    if near.all():
        return
    address = int(addresses[np.argmin(near)])
    name, lo, hi = min(_storages, key=lambda r: min(abs(address - r[1]), abs(address - r[2])))
    where = (
        f"{lo - address} bytes before"
        if address < lo
        else f"{address - hi + 1} bytes past the end of"
    )
    raise WildAccess(
        f"bounds: kernel {_kernel_name} {kind} at 0x{address:x}, {where} the storage of its "
        f"argument '{name}' (the nearest of {len(_storages)}), no tensor it was given within "
        f"{WILD_BYTES} bytes: on a GPU an illegal memory access. An offset that wrapped at 32 "
        "bits (an i32 program_id or argument times a stride) lands so"
    )


def _install_access_hooks(builder, interp) -> None:
    from . import _races

    load, store = builder.create_masked_load, builder.create_masked_store
    rmw, cas, barrier = builder.create_atomic_rmw, builder.create_atomic_cas, builder.create_barrier

    def masked_load(ptrs, mask, *rest):
        _check_wild("loads", ptrs, mask)
        if _launch is not None:
            _launch.record(_races.LOAD, ptrs.data, mask.data, _element_bytes(ptrs))
        return load(ptrs, mask, *rest)

    def masked_store(ptrs, value, mask, *rest):
        _check_wild("stores", ptrs, mask)
        if _launch is not None:
            _launch.record(_races.STORE, ptrs.data, mask.data, _element_bytes(ptrs))
        return store(ptrs, value, mask, *rest)

    def atomic_rmw(op, ptr, val, mask, *rest):
        _check_wild("updates atomically", ptr, mask)
        if _launch is not None:
            _launch.record(_races.ATOMIC, ptr.data, mask.data, _element_bytes(ptr))
        return rmw(op, ptr, val, mask, *rest)

    def atomic_cas(ptr, *rest):
        _check_wild("updates atomically", ptr, None)
        if _launch is not None:
            _launch.record(_races.ATOMIC, ptr.data, None, _element_bytes(ptr))
        return cas(ptr, *rest)

    def debug_barrier():
        if _launch is not None:
            _launch.barrier()
        return barrier()

    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    builder.create_atomic_rmw, builder.create_atomic_cas = atomic_rmw, atomic_cas
    builder.create_barrier = debug_barrier

    launch_grid = interp.GridExecutor.__call__
    skip = (os.path.dirname(interp.__file__).rsplit(os.sep, 1)[0], os.path.dirname(__file__))

    def checked_launch(self, *args, **kwargs):
        global _launch, _storages, _kernel_name
        outer = (_storages, _kernel_name)
        named = list(zip(self.arg_names, args)) + list(kwargs.items())
        _storages, _kernel_name = _storage_ranges(named), self.fn.__name__
        try:
            if _race_tensors is None:
                return launch_grid(self, *args, **kwargs)
            _launch = _races.LaunchRecord(self.fn.__name__, _race_tensors, skip)
            try:
                result = launch_grid(self, *args, **kwargs)
                found = _launch.find()
            finally:
                _launch = None
            if found:
                raise _races.RaceFound(found)
            return result
        finally:
            _storages, _kernel_name = outer

    interp.GridExecutor.__call__ = checked_launch
    restore = interp.GridExecutor._restore_args_dev

    def restore_args(self, args_dev, args_hst, kwargs, kwargs_hst):
        # A CPU tensor's host copy is the tensor itself: copying its storage onto itself would
        # touch every page of it (a lazily mapped reservation of gigabytes, for one).
        def itself(dev, hst) -> bool:
            return (
                hasattr(dev, "untyped_storage")
                and hasattr(hst, "untyped_storage")
                and dev.untyped_storage().data_ptr() == hst.untyped_storage().data_ptr()
            )

        args_dev = [None if itself(d, h) else d for d, h in zip(args_dev, args_hst)]
        kwargs = {k: None if itself(v, kwargs_hst.get(k)) else v for k, v in kwargs.items()}
        return restore(self, args_dev, args_hst, kwargs, kwargs_hst)

    interp.GridExecutor._restore_args_dev = restore_args


def _byte_range(a) -> tuple:
    """[lo, hi) of the bytes a NumPy array or a torch tensor spans."""
    if isinstance(a, np.ndarray):
        lo, hi = np.byte_bounds(a)
        return int(lo), int(hi)
    size = a.element_size()
    span = 1 + sum((n - 1) * abs(st) for n, st in zip(a.shape, a.stride())) if a.numel() else 0
    return int(a.data_ptr()), int(a.data_ptr()) + span * size


@contextlib.contextmanager
def race_check(tensors: dict | None = None):
    """While the body runs, every launch under the interpreter is recorded and checked for
    races when it ends (``RaceFound``, an AssertionError naming the check "races", the kernel,
    the tensor and both source lines). ``tensors`` (name -> array or tensor) names the memory
    in the reports; tensors allocated during the body are named as guarded scratch."""
    global _race_tensors
    interpreter()
    outer = _race_tensors
    _race_tensors = {name: _byte_range(t) for name, t in (tensors or {}).items()}
    try:
        yield
    finally:
        _race_tensors = outer


@contextlib.contextmanager
def program_order(seed: int | None):
    """While the body runs, the programs of each launch run in an order drawn from ``seed``
    (each launch its own); None keeps the interpreter's order."""
    global _order_seed, _launches
    interpreter()
    outer = (_order_seed, _launches)
    _order_seed, _launches = seed, 0
    try:
        yield
    finally:
        _order_seed, _launches = outer


# ---- autotune configs as variants --------------------------------------------------------------


def _autotuner(kernel):
    """The Autotuner behind a kernel object (through heuristics), or None if it is not tuned."""
    from triton.runtime.autotuner import Autotuner

    seen = 0
    while kernel is not None and seen < 8:
        if isinstance(kernel, Autotuner):
            return kernel
        kernel, seen = getattr(kernel, "fn", None), seen + 1
    return None


def kernels_of(module) -> list:
    """The Triton kernels a module defines (autotuned or not), for an adapter's ``kernels()``."""
    from triton.runtime.jit import KernelInterface

    return [v for v in vars(module).values() if isinstance(v, KernelInterface)]


def config_name(config) -> str:
    """A config's name: its meta-parameters, ``BLOCK_H=2`` (``default`` when it has none). The
    interpreter runs programs one at a time, so num_warps and num_stages change nothing here and
    configs that differ only in them are one variant."""
    items = sorted(config.kwargs.items())
    return ",".join(f"{k}={v}" for k, v in items) or "default"


class TritonBackend:
    """An adapter's ops under the interpreter, one variant per autotune config.

    ``adapter``: an object with ``supports(call)`` and some of ``rope``, ``kv_split``,
    ``kv_split_backward`` (the Python backend protocol of ``mlarope``), and ``kernels()``
    returning the Triton kernel objects its ops launch; optionally ``environment()`` (a dict of
    what it loaded: versions, files) and ``select_config(name, meta)`` (told each variant's
    meta-parameters, so that it can decline, by name, the calls a known finding of that config
    spoils). ``configs``: names of the variants to run (default: all;
    ``variants()`` lists them). ``timeout``: seconds a call may run. ``races``: check each
    launch's accesses for races in the races check's run (``with_races``: ``RaceFound`` fails
    that run). ``config_bitwise``: run each
    call of an op whose result cannot depend on tiling (rope forward or inverse, kv_split)
    under a second config too, drawn from the call's inputs, and require the same bits
    (``ConfigsDisagree`` fails the call, naming both configs and the first differing element).
    ``fp_fusion``: multiply-adds contracted into one rounding, as Triton compiles them by
    default (``enable_fp_fusion``), or computed as written.
    """

    def __init__(
        self,
        adapter,
        configs=None,
        timeout: float = 60.0,
        races: bool = True,
        config_bitwise: bool = True,
        fp_fusion: bool = True,
    ):
        self.triton = interpreter()
        self.adapter = adapter
        self.timeout = float(timeout)
        self.config_bitwise = config_bitwise
        self.fp_fusion = fp_fusion
        self.order_seed = None
        self.recording = False  # this copy records every launch's accesses (with_races)
        if not races:
            self.with_races = None  # the races check is skipped, saying the backend has none
        self._tuners = [t for t in map(_autotuner, adapter.kernels()) if t is not None]
        for tuner in self._tuners:  # its own list, before select_variant narrows it to one
            if not hasattr(tuner, "_mlarope_configs"):
                tuner._mlarope_configs = list(tuner.configs)
        self._all_configs = [t._mlarope_configs for t in self._tuners]
        names = []
        for configs_of_one in self._all_configs:
            for c in configs_of_one:
                if config_name(c) not in names:
                    names.append(config_name(c))
        self._variants = names or ["default"]
        if configs is not None:
            unknown = [c for c in configs if c not in self._variants]
            if unknown:
                raise ValueError(
                    f"configs {unknown}: not configs of the adapter's kernels "
                    f"(they have {', '.join(self._variants)})"
                )
            self._variants = list(configs)
        self.variant = None
        self.select_variant(self._variants[0])
        self._bind_ops()

    def _bind_ops(self) -> None:
        for method in ("rope", "kv_split", "kv_split_backward"):
            if hasattr(self.adapter, method):
                setattr(self, method, functools.partial(self._run, getattr(self.adapter, method)))

    def variants(self) -> list:
        return list(self._variants)

    def with_order_seed(self, seed: int):
        """The same backend with the programs of each launch run in an order drawn from
        ``seed``: the order_independence check requires the same bits."""
        other = copy.copy(self)
        other.order_seed = int(seed)
        other._bind_ops()
        return other

    def with_races(self):
        """The same backend recording each launch's global accesses: a launch that races
        raises ``RaceFound`` (the races check runs its case so)."""
        other = copy.copy(self)
        other.recording = True
        other._bind_ops()
        return other

    def select_variant(self, name: str) -> None:
        """Every autotuned kernel runs its config called ``name``; a kernel without one runs its
        first config (each kernel's configs are listed in the summary's variants)."""
        if name not in self._variants:
            raise ValueError(f"variant {name!r}: not one of {', '.join(self._variants)}")
        for tuner, configs in zip(self._tuners, self._all_configs):
            chosen = [c for c in configs if config_name(c) == name] or configs[:1]
            tuner.configs = chosen[:1]  # one config: the autotuner runs it without timing
            tuner.cache = {}
        self.variant = name
        if hasattr(self.adapter, "select_config"):  # an adapter that declines a known finding
            kwargs = next(
                (c.kwargs for cs in self._all_configs for c in cs if config_name(c) == name), {}
            )
            self.adapter.select_config(name, dict(kwargs))

    def environment(self) -> dict:
        import torch

        env = {
            "torch": torch.__version__,
            "triton": self.triton.__version__,
            "triton_interpreter": True,
        }
        if hasattr(self.adapter, "environment"):
            env.update(self.adapter.environment())
        return env

    def supports(self, call):
        return self.adapter.supports(call) if hasattr(self.adapter, "supports") else True

    #: Ops whose result cannot depend on how a kernel tiles them: every config gives its bits.
    TILING_FREE_OPS = ("rope", "kv_split")

    def _run(self, method, call) -> None:
        other = self._second_config(call)
        if other is None:
            self._run_once(method, call)
            return
        # Every array the call hands over, inputs too: an in-place call's input is a read-only
        # view that the kernel writes through torch.
        arrays = {n: _writable_alias(a) for n, a in self._call_tensors(call).items()}
        before = {n: a.copy() for n, a in arrays.items()}
        self._run_once(method, call)
        first = {n: a.copy() for n, a in arrays.items()}
        chosen = self.variant
        try:
            self.select_variant(other)
            verdict = self.supports(call)  # a config may decline what a known finding spoils
            if verdict[0] if isinstance(verdict, tuple) else bool(verdict):
                for n, a in arrays.items():
                    np.copyto(a, before[n])
                try:
                    self._run_once(method, call)
                except Exception as e:
                    e.add_note(f"(in the run under {other}, the second config of this call)")
                    raise
                _require_same_bits(first, arrays, chosen, other)
        finally:
            for n, a in arrays.items():
                np.copyto(a, first[n])
            self.select_variant(chosen)

    def _second_config(self, call):
        """The config a tiling-free call is run under too, drawn from its inputs' bytes (so a
        replay compares the same pair); None where there is nothing to compare."""
        if not self.config_bitwise or len(self._variants) < 2:
            return None
        if getattr(call, "op", None) not in self.TILING_FREE_OPS:
            return None
        digest = 0
        for _, a in sorted(self._call_tensors(call).items()):
            if not a.flags.writeable:
                digest = zlib.crc32(np.ascontiguousarray(a).view(np.uint8).tobytes(), digest)
        at = self._variants.index(self.variant)
        step = 1 + digest % (len(self._variants) - 1)
        return self._variants[(at + step) % len(self._variants)]

    def _run_once(self, method, call) -> None:
        global _deadline
        _deadline = time.monotonic() + self.timeout
        checked = (
            race_check(self._call_tensors(call)) if self.recording else contextlib.nullcontext()
        )
        try:  # NaN guards and edge values make NumPy warn on every program: not news here
            fusion = _gpu_float.fusion(self.fp_fusion)
            with checked, fusion, program_order(self.order_seed), _guarded_allocations():
                with np.errstate(all="ignore"):
                    method(call)
        finally:
            _deadline = None

    @staticmethod
    def _call_tensors(call) -> dict:
        """The call's arrays by name ("cos", "outputs[0]", ...: the harness's calls hold their
        tensors in the lists ``inputs`` and ``outputs``)."""
        named = {}
        for name in dir(call):
            if name.startswith("_"):
                continue
            value = getattr(call, name, None)
            items = value if isinstance(value, (list, tuple)) else None
            for i, a in enumerate(items if items is not None else [value]):
                if isinstance(a, np.ndarray) and a.size:
                    named[f"{name}[{i}]" if items is not None else name] = a
        return named
