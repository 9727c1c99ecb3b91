# SPDX-License-Identifier: Apache-2.0
"""Replay case directories on Megatron's fused MLA kernels, each in a fresh process (a fault
in one cannot poison the next), twice: with device copies that keep the views' strides, then
with C-order copies (does the finding depend on the strides?); print every check's line.

    CUDA_LAUNCH_BLOCKING=1 python adapters/megatron/replay_fused.py CASE_DIR...

Needs a GPU with torch and triton, the mlarope package and megatron-core on PYTHONPATH.
Exit status 1 when a case fails or its process dies.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def replay_one(case_dir: str, contiguous: bool) -> int:
    import mlarope
    from megatron_fused import MegatronFusedMLA

    # Nothing declined on purpose: a repro of THD padding rows runs them.
    backend = MegatronFusedMLA(device="cuda", contiguous=contiguous, decline_padding=False)
    result = mlarope.check(backend, case_dir)
    for _check, _outcome, line in result["results"]:
        print(f"  {line}", flush=True)
    return 0 if result["ok"] else 1


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        return replay_one(sys.argv[3], sys.argv[2] == "contiguous")
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) == 2 else 2
    worst = 0
    for case_dir in sys.argv[1:]:
        for copies in ("strided", "contiguous"):
            print(f"{case_dir} ({copies} device copies):", flush=True)
            rc = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--one", copies, case_dir]
            ).returncode
            print(
                f"  -> {'ok' if rc == 0 else 'FAILED' if rc == 1 else f'process died (rc {rc})'}",
                flush=True,
            )
            worst = max(worst, 1 if rc else 0)
    return worst


if __name__ == "__main__":
    sys.exit(main())
