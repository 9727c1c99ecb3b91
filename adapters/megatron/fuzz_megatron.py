# SPDX-License-Identifier: Apache-2.0
"""Fuzz megatron-core's RoPE through the adapters and print the summary (supported and
unsupported counts, failures with their repro directories). Exit status 1 when a case fails.

    python adapters/megatron/fuzz_megatron.py --backend unfused --seconds 60
    python adapters/megatron/fuzz_megatron.py --backend fused --seconds 60   # CUDA + Triton
    python adapters/megatron/fuzz_megatron.py --backend interpreter --seconds 60  # Triton, no GPU

Needs the mlarope package (pip install .) and megatron-core (requirements.txt, or its files
unpacked on PYTHONPATH, as ci/gpu-check.sh does); ``unfused`` runs on the host, ``fused`` needs a
GPU; ``interpreter`` runs the fused kernels on the host under Triton's interpreter
(mlarope.triton: every autotune config a variant; the known findings declined by name).
MLAROPE_MEGATRON_ROOT names another release's unpacked files (megatron_sources.py).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mlarope  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backend",
        choices=["unfused", "fused", "interpreter"],
        required=True,
        help="unfused: rope_utils' PyTorch path (f32, out of place); fused: the Triton MLA "
        "kernels on a GPU; interpreter: the same under Triton's interpreter, on the host",
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="time budget (default 60)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the run (default 1)")
    parser.add_argument(
        "--out", default="megatron-fuzz-out", help="fuzz.json and failures/ go here"
    )
    args = parser.parse_args()
    if args.backend == "interpreter":  # before Megatron's fused file imports triton
        from mlarope import triton as mt

        mt.interpreter()
    import megatron_sources

    print(f"megatron-core {megatron_sources.load().version}, backend {args.backend}", flush=True)
    if args.backend == "unfused":
        from megatron_unfused import MegatronUnfused

        backend, narrow = (
            MegatronUnfused(),
            dict(
                ops=["rope", "rope_backward"], dtypes=["f32"], table_dtypes=["f32"], in_place=False
            ),
        )
    elif args.backend == "fused":
        from megatron_fused import MegatronFusedMLA

        backend, narrow = MegatronFusedMLA(device="cuda"), dict(layouts="interleaved/half/*")
    else:
        from megatron_fused import FUZZ_NARROWING, MegatronFusedMLA

        backend = mt.TritonBackend(MegatronFusedMLA(device="cpu", decline_padding=True))
        narrow = FUZZ_NARROWING
    try:
        result = mlarope.fuzz(
            backend, seconds=args.seconds, seed=args.seed, out=args.out, quiet=True, **narrow
        )
    except mlarope.FuzzFailure as failure:
        print(failure.result["summary"])
        return 1
    print(result["summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
