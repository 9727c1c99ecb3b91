# SPDX-License-Identifier: Apache-2.0
"""mlarope.triton on a kernel of our own under Triton's interpreter: autotune configs as
variants, guards around what a call allocates, the per-call time limit, bf16 run (not declined) and
the Triton version check. Skips without Triton (python/requirements-triton.txt)."""

import importlib.util
import types

import numpy as np
import pytest

if importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None:
    pytest.skip(
        "triton or torch is not installed (pip install --no-deps --require-hashes "
        "-r python/requirements-triton.txt)",
        allow_module_level=True,
    )

from mlarope import triton as mt  # noqa: E402

triton = mt.interpreter()  # before the kernel below is decorated
import torch  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 2}),
        triton.Config({"BLOCK": 4}),
        triton.Config({"BLOCK": 4}, num_warps=8),  # the same variant under the interpreter
    ],
    key=["n"],
)
@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if BLOCK == 4:  # a planted bug of one config: its mask lets one element past the end
        mask = offsets <= n
    else:
        mask = offsets < n
    tl.store(out_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


class Doubler:
    """An adapter whose one op launches double_kernel into an output it allocates, as library
    wrappers do (``torch.empty_like``); ``call`` carries the input."""

    def kernels(self):
        return [double_kernel]

    def rope(self, call):
        x = call.x
        out = torch.empty_like(x)
        grid = (triton.cdiv(x.numel(), 2) * call.programs,)
        double_kernel[grid](x, out, x.numel())
        call.result = out.clone()


def call_with(n, programs=1):
    return types.SimpleNamespace(x=torch.arange(n, dtype=torch.float32), programs=programs)


def test_configs_are_variants_and_the_failing_one_is_caught_by_the_guard():
    backend = mt.TritonBackend(Doubler())
    assert backend.variants() == ["BLOCK=2", "BLOCK=4"]
    backend.select_variant("BLOCK=2")
    call = call_with(6)
    backend.rope(call)
    assert call.result.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    backend.select_variant("BLOCK=4")
    with pytest.raises(mt.GuardWritten, match="guard after tensor 'torch.empty_like'"):
        backend.rope(call_with(6))
    assert mt.TritonBackend(Doubler(), configs=["BLOCK=4"]).variants() == ["BLOCK=4"]
    with pytest.raises(ValueError, match="BLOCK=8"):
        mt.TritonBackend(Doubler(), configs=["BLOCK=8"])


def test_a_call_past_its_time_limit_fails():
    backend = mt.TritonBackend(Doubler(), configs=["BLOCK=2"], timeout=0.5)
    backend.rope(call_with(4))  # two programs: well inside the limit
    with pytest.raises(Exception, match="per-call time limit"):
        backend.rope(call_with(4, programs=100_000))  # minutes of programs


def test_guards_of_scratch_read_as_nan_and_catch_stores():
    with mt._guarded_allocations():
        t = mt.scratch((3,), torch.float32, "table")
        t.fill_(1.0)
        whole = t.as_strided((5,), (1,), t.storage_offset() - 1)  # one element either side
        assert torch.isnan(whole[0]) and torch.isnan(whole[4])
    with pytest.raises(mt.GuardWritten, match="guard before tensor 'table'"):
        with mt._guarded_allocations():
            t = mt.scratch((3,), torch.float32, "table")
            t.as_strided((1,), (1,), t.storage_offset() - 1).fill_(0.0)


def test_allocations_on_a_named_cpu_device_are_guarded():
    # torch.device("cpu") is the CPU too: what a wrapper allocates so is guarded like the rest.
    with pytest.raises(mt.GuardWritten, match="torch.empty"):
        with mt._guarded_allocations():
            t = torch.empty((3,), dtype=torch.float32, device=torch.device("cpu"))
            t.as_strided((1,), (1,), t.storage_offset() + 3).fill_(0.0)  # one past the end


@triton.jit
def copy_rows_kernel(x_ptr, out_ptr, rows, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = row * BLOCK + tl.arange(0, BLOCK)
    keep = row < rows  # a scalar comparison, spread over the block as the mask
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=keep), mask=keep)


def test_a_scalar_comparison_spread_as_a_mask_runs_as_on_a_gpu():
    x = torch.arange(8, dtype=torch.float32)
    out = torch.zeros(8)
    copy_rows_kernel[(2,)](x, out, 2, BLOCK=4)
    assert torch.equal(out, x)


def test_bf16_is_run_not_declined():
    backend = mt.TritonBackend(Doubler())
    assert backend.supports(types.SimpleNamespace(dtype="bf16", table_dtype="bf16")) is True


def test_a_triton_release_the_shims_do_not_know_is_a_named_error(monkeypatch):
    monkeypatch.setattr(triton, "__version__", "9.9.9")
    with pytest.raises(mt.UnknownTriton, match="Triton 9.9.9"):
        mt.interpreter()


@triton.autotune(configs=[triton.Config({"BLOCK": 2}), triton.Config({"BLOCK": 4})], key=["n"])
@triton.jit
def triple_kernel(x_ptr, out_ptr, n, PLANTED: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if PLANTED and BLOCK == 4:  # a config that rounds differently: close, but not the same bits
        y = (x * 3 + 1.0) - 1.0
    else:
        y = x * 3
    tl.store(out_ptr + offsets, y, mask=mask)


class Tripler:
    """An adapter whose rope (so called: a tiling-free op) triples call.x into call.out, NumPy
    arrays as the harness hands them (the input read-only)."""

    def __init__(self, planted):
        self.planted = planted

    def kernels(self):
        return [triple_kernel]

    def rope(self, call):
        x, out = mt.torch_view(call.x, "f32"), mt.torch_view(call.out, "f32")
        grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)  # noqa: E731
        triple_kernel[grid](x, out, x.numel(), PLANTED=self.planted)


def tripling_call(op="rope"):
    x = np.linspace(0.1, 0.9, 7, dtype=np.float32)
    x.flags.writeable = False
    return types.SimpleNamespace(op=op, dtype="f32", x=x, out=np.zeros(7, np.float32))


def test_a_config_that_rounds_differently_is_caught_naming_both_configs():
    backend = mt.TritonBackend(Tripler(planted=True))
    backend.select_variant("BLOCK=2")
    call = tripling_call()
    with pytest.raises(mt.ConfigsDisagree) as found:
        backend.rope(call)
    message = str(found.value)
    assert message.startswith("configs: BLOCK=2 and BLOCK=4 give different bits for 'out' at (")
    assert backend.variant == "BLOCK=2", "the chosen config is selected again"
    assert np.array_equal(call.out, call.x * np.float32(3)), "the chosen config's result is kept"


def test_configs_that_agree_pass_and_only_tiling_free_ops_are_compared():
    call = tripling_call()
    mt.TritonBackend(Tripler(planted=False)).rope(call)
    assert np.array_equal(call.out, call.x * np.float32(3))
    mt.TritonBackend(Tripler(planted=True)).rope(tripling_call(op="rope_backward"))
    mt.TritonBackend(Tripler(planted=True), config_bitwise=False).rope(tripling_call())
