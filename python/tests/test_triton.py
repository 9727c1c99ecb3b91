# SPDX-License-Identifier: Apache-2.0
"""mlarope.triton on a kernel of our own under Triton's interpreter: autotune configs as
variants, guards around what a call allocates, the per-call time limit, the bf16 decline and
the Triton version check. Skips without Triton (python/requirements-triton.txt)."""

import importlib.util
import types

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


def test_bf16_is_declined_by_name():
    backend = mt.TritonBackend(Doubler())
    verdict = backend.supports(types.SimpleNamespace(dtype="bf16", table_dtype="f32"))
    assert verdict[0] is False and "bf16 under Triton's interpreter" in verdict[1]


def test_a_triton_release_the_shims_do_not_know_is_a_named_error(monkeypatch):
    monkeypatch.setattr(triton, "__version__", "9.9.9")
    with pytest.raises(mt.UnknownTriton, match="Triton 9.9.9"):
        mt.interpreter()
