#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The timing model's batches of loads held to the compiled code (CTest `sass_batches`).

The GPU model counts a thread's loads since its last store, global or shared (or
MLAROPE_END_LOAD_BATCH), as one batch in flight, and the timing model prices a kernel by those
batches. That holds only if the compiler keeps them: a source change that it serializes (a
load, its use, the next load) would leave the model's figures standing while the kernel slows.
This check disassembles the built CUDA kernels with their inlined source lines (nvcc -lineinfo;
cuobjdump -xelf, nvdisasm -gi) and cuts each kernel's code into straight runs (a run ends at a
global or shared store, at a backward branch, at an instruction that reads a register a load
of the run wrote and at a wait for asynchronous copies (DEPBAR); an asynchronous copy to shared
memory (LDGSTS, cp.async) is a load of the run that writes no register). It requires, for
every kernel the benchmark shapes run:
  - at each batched load of the sources (a line marked `// SASS batch: NAME` in cuda/kernels/,
    or the line after such a comment; NAME the constant of its batch's size), a run holding
    at least NAME of that line's loads: the batch's loop was unrolled, not left to issue one
    load an iteration;
  - a run of global-load bytes at least as large as the model's largest batch of the kernel
    (`mlarope_bench --model-table --json`).

    ci/sass_batches.py --bench BUILD/mlarope_bench --sources DIR [--tools DIR] OBJECT...
    ci/sass_batches.py --selftest

--tools: the folder of cuobjdump and nvdisasm (default: PATH, /usr/local/cuda/bin, then where
ci/fetch-cuda-tools.sh keeps them).
Exit status 0: every kernel keeps its batches; 1: one does not; 2: bad input (a kernel of the
model missing from the objects, a tool failing); 77: no cuobjdump or nvdisasm (skipped).
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

MARKER = re.compile(r"// SASS batch: (\w+)")
WIDTH = {".128": 16, ".64": 8, ".U16": 2, ".S16": 2, ".U8": 1, ".S8": 1}


def short_name(mangled):
    """'_ZN...rope_kernel...' -> 'rope_kernel<RopeChunkedRows<BFloat16, 4> >' (the timing
    model's names: no return type, namespaces or parameters)."""
    name = subprocess.run(["c++filt", mangled], capture_output=True, text=True).stdout.strip()
    name = re.sub(r"mlarope::(kernels::|cuda_launch::)?|\(anonymous namespace\)::", "", name)
    name = name.split("(")[0]
    return name[len("void ") :] if name.startswith("void ") else name


def batch_sites(sources):
    """{(file name, line): loads the batch holds} of the loads marked under `sources`, each
    size the value of the constant its mark names (`inline constexpr int NAME = N;`)."""
    headers = glob.glob(os.path.join(sources, "**", "*.h"), recursive=True)
    text = "".join(open(path).read() for path in headers)
    sites = {}
    for path in headers:
        for number, line in enumerate(open(path), 1):
            mark = MARKER.search(line)
            if not mark:
                continue
            if line.lstrip().startswith("//"):  # a mark of its own marks the line after it
                number += 1
            size = re.search(r"constexpr int " + mark.group(1) + r" = (\d+);", text)
            if not size:
                raise ValueError(f"{path}:{number}: no constant {mark.group(1)} under {sources}")
            sites[(os.path.basename(path), number)] = int(size.group(1))
    return sites


REGISTER = re.compile(r"\bR(\d+)\b")


def loaded_registers(op_suffix, instruction):
    """The registers an LDG writes: its destination and, for a vector load, the ones after."""
    first = REGISTER.search(instruction.split(None, 1)[1] if " " in instruction else "")
    if not first:
        return set()
    width = next((w for k, w in WIDTH.items() if k in op_suffix), 4)
    return {int(first.group(1)) + i for i in range(max(1, width // 4))}


def operands(instruction):
    """(destination registers, source registers) of a SASS instruction (the first operand is
    its destination, except for stores and branches, which have none)."""
    body = instruction.split(None, 1)
    if body and body[0].startswith("@"):  # a predicate guard
        body = body[1].split(None, 1)
    if len(body) < 2:
        return set(), set()
    parts = body[1].split(",", 1)
    if re.match(r"(ST|RED|ATOM|BRA|EXIT|BAR)", body[0]):
        return set(), {int(r) for r in REGISTER.findall(body[1])}
    dest = {int(r) for r in REGISTER.findall(parts[0])}
    return dest, {int(r) for r in REGISTER.findall(parts[1])} if len(parts) > 1 else set()


def analyse(sass, sites):
    """{function: (longest run of load bytes, {site: most of its loads in one run})} of
    nvdisasm -gi text. A run ends at a global or shared store, at a branch to an earlier
    address and at an instruction that reads a register a load of the run wrote (the warp
    waits there for that load before it issues the next)."""
    result = {}
    for part in re.split(r"\n\.text\.", sass)[1:]:
        mangled = part.split(":", 1)[0].strip()
        lines = part.split("\n")
        labels, address = {}, None
        for line in lines:  # each label's address: that of the instruction after it
            label = re.match(r"^(\.L_x_\d+):", line)
            if label:
                labels[label.group(1)] = None
            m = re.search(r"/\*([0-9a-f]{4,})\*/", line)
            if m:
                address = int(m.group(1), 16)
                for name, at in labels.items():
                    if at is None:
                        labels[name] = address
        # The source lines (inlined ones included) of the instructions that follow: nvdisasm
        # prints them where they change, so they hold until the next comment lines.
        best, current, here, loaded, fresh = 0, 0, set(), set(), False
        counts, best_counts = {}, {}
        for line in lines:
            where = []
            if line.lstrip().startswith("//##"):
                where = re.findall(r'"([^"]+)", line (\d+)', line)
            if where:
                lines_here = {(os.path.basename(f), int(n)) for f, n in where}
                here = (here if fresh else set()) | lines_here
                fresh = True
                continue
            m = re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
            if not m:
                continue
            at, instruction = int(m.group(1), 16), m.group(2)
            fresh = False
            op = re.search(
                r"\b(LDGDEPBAR|LDGSTS|LDG|STG|STS|BRA|DEPBAR)((?:\.[A-Z0-9_]+)*)", instruction
            )
            if op and op.group(1) == "LDGDEPBAR":  # closes a group of copies; no wait
                continue
            dest, sources = operands(instruction)
            if op and op.group(1) == "LDGSTS":  # every register it names is an address
                sources = {int(r) for r in REGISTER.findall(instruction.split(None, 1)[1])}
            if op and op.group(1) in ("LDG", "LDGSTS"):
                if sources & loaded:  # its address comes from a load of the run
                    current, counts, loaded = 0, {}, set()
                current += next((w for k, w in WIDTH.items() if k in op.group(2)), 4)
                best = max(best, current)
                if op.group(1) == "LDG":  # an asynchronous copy writes shared memory only
                    loaded |= loaded_registers(op.group(2), instruction)
                for site in here & sites.keys():
                    counts[site] = counts.get(site, 0) + 1
                    best_counts[site] = max(best_counts.get(site, 0), counts[site])
                continue
            if not op:
                if sources & loaded:  # a use: the warp waits for the load
                    current, counts, loaded = 0, {}, set()
                loaded -= dest
                continue
            if op.group(1) == "BRA":
                target = re.search(r"\(?(\.L_x_\d+)\)?|0x([0-9a-f]+)", instruction)
                to = None
                if target and target.group(1):
                    to = labels.get(target.group(1))
                elif target:
                    to = int(target.group(2), 16)
                if to is None or to > at:
                    continue  # forward: the run goes on
            current, counts, loaded = 0, {}, set()
        result[mangled] = (best, best_counts)
    return result


def selftest():
    """The run rule on hand-written nvdisasm -gi text."""
    sass = """
.text._Z1fv:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_1:
	//## File "/src/segment_copy.h", line 60 inlined at "/src/k.cu", line 3
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
	//## File "/src/segment_copy.h", line 60 inlined at "/src/k.cu", line 3
        /*0020*/                   LDG.E.128 R8, desc[UR4][R2.64+0x10] ;
	//## File "/src/other.h", line 1
        /*0030*/                   LDG.E.64 R12, desc[UR4][R2.64+0x20] ;
        /*0040*/                   STG.E.128 desc[UR4][R6.64], R4 ;
	//## File "/src/rope.h", line 9
        /*0050*/                   LDG.E R14, desc[UR4][R2.64] ;
        /*0060*/               @P0 BRA `(.L_x_1) ;
	//## File "/src/rope.h", line 9
        /*0070*/                   LDG.E.U16 R15, desc[UR4][R2.64] ;
        /*0080*/               @P0 BRA `(.L_x_2) ;
.L_x_2:
	//## File "/src/other.h", line 2
        /*0090*/                   LDG.E R16, desc[UR4][R2.64] ;
.text._Z1gv:
        /*0000*/                   LDG.E R4, desc[UR4][R2.64] ;
        /*0010*/                   STG.E desc[UR4][R6.64], R4 ;
.text._Z1hv:
        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0010*/                   STS.128 [R0], R4 ;
        /*0020*/                   LDG.E.128 R8, desc[UR4][R2.64+0x10] ;
.text._Z1uv:
	//## File "/src/freq_row.h", line 5
        /*0000*/                   LDG.E R4, desc[UR4][R2.64] ;
	//## File "/src/freq_row.h", line 5
        /*0010*/                   LDG.E R5, desc[UR4][R8.64] ;
        /*0020*/                   IADD3 R6, R4, -R7, RZ ;
	//## File "/src/freq_row.h", line 5
        /*0030*/                   LDG.E R9, desc[UR4][R10.64] ;
        /*0040*/                   MOV R9, RZ ;
        /*0050*/                   LDG.E R11, desc[UR4][R12.64] ;
        /*0060*/                   IADD3 R13, R9, RZ, RZ ;
        /*0070*/                   LDG.E R14, desc[UR4][R16.64] ;
	//## File "/src/freq_row.h", line 5
        /*0080*/                   LDG.E R15, desc[UR4][R14.64] ;
.text._Z1av:
	//## File "/src/rope.h", line 20
        /*0000*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR4][R4.64] ;
        /*0010*/                   LDGSTS.E.64 [R3+0x800], desc[UR4][R6.64] ;
        /*0020*/                   LDGDEPBAR ;
        /*0030*/                   LDG.E R8, desc[UR4][R10.64] ;
        /*0040*/                   DEPBAR.LE SB0, 0x0 ;
        /*0050*/                   LDG.E R12, desc[UR4][R4.64+0x10] ;
        /*0060*/                   LDGSTS.E.BYPASS.128 [R3+0x20], desc[UR4][R12.64] ;
"""
    got = analyse(
        sass,
        {("segment_copy.h", 60): 2, ("rope.h", 9): 2, ("freq_row.h", 5): 2, ("rope.h", 20): 2},
    )
    # f: 16 + 16 + 8 = 40 before the store, two loads of segment_copy.h:60 in that run; the
    # loop's back edge cuts rope.h:9's two loads apart; 2 + 4 run on past a forward branch.
    # h: a shared store ends a run as a global one does.
    # u: a use of R4 (loaded in the run) ends it; R9, written over, is no longer a load's, so
    # its use does not (R9, R11, R14: 12 bytes); a load whose address a load of the run wrote
    # (R14) ends it too. An instruction without source lines has those of the one before.
    # a: asynchronous copies are loads of the run (16 + 8 + 4 = 28, past the group's close);
    # the wait ends it; a copy whose address a load of the run gave (R12) ends one too.
    expected = {
        "_Z1fv": (40, {("segment_copy.h", 60): 2, ("rope.h", 9): 1}),
        "_Z1gv": (4, {}),
        "_Z1hv": (16, {}),
        "_Z1uv": (12, {("freq_row.h", 5): 3}),
        "_Z1av": (28, {("rope.h", 20): 3}),
    }
    if got != expected:
        print(f"sass_batches selftest: {got} != {expected}")
        return 1
    print("sass_batches selftest: the run rule holds on hand-written SASS")
    return 0


def tool(name, folder):
    """The path of `name` in `folder`, on PATH, in /usr/local/cuda/bin or where
    ci/fetch-cuda-tools.sh keeps it; None where absent."""
    cache = os.environ.get("MLAROPE_SCHEMA_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mlarope"
    )
    for candidate in ([os.path.join(folder, name)] if folder else []) + [
        shutil.which(name) or "",
        os.path.join("/usr/local/cuda/bin", name),
        os.path.join(cache, "cuda-tools", "bin", name),
    ]:
        if candidate and os.path.exists(candidate):
            return candidate
    return None


def disassemble(obj, cuobjdump, nvdisasm):
    """nvdisasm -gi of every cubin of `obj`, or None when a tool fails (its error printed)."""
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [cuobjdump, "-xelf", "all", os.path.abspath(obj)],
            cwd=tmp,
            capture_output=True,
            text=True,
        )
        cubins = glob.glob(os.path.join(tmp, "*.cubin"))
        if done.returncode != 0 or not cubins:
            print(f"sass_batches: cuobjdump -xelf all {obj} failed:\n{done.stdout}{done.stderr}")
            return None
        text = ""
        for cubin in cubins:
            done = subprocess.run([nvdisasm, "-gi", "-c", cubin], capture_output=True, text=True)
            if done.returncode != 0:
                print(f"sass_batches: nvdisasm -gi {cubin} failed:\n{done.stderr}")
                return None
            text += done.stdout
        return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", help="mlarope_bench, for the model's batches")
    parser.add_argument("--sources", help="the kernels' sources (cuda/kernels), for the marks")
    parser.add_argument("--tools", help="the folder of cuobjdump and nvdisasm")
    parser.add_argument("--selftest", action="store_true")
    parser.add_argument("objects", nargs="*")
    args = parser.parse_args()
    if args.selftest:
        return selftest()
    if not args.bench or not args.sources or not args.objects:
        parser.error("--bench, --sources and at least one OBJECT are required")
    cuobjdump, nvdisasm = tool("cuobjdump", args.tools), tool("nvdisasm", args.tools)
    if not cuobjdump or not nvdisasm:
        print("sass_batches: SKIPPED: no cuobjdump or nvdisasm (bash ci/fetch-cuda-tools.sh)")
        return 77
    try:
        sites = batch_sites(args.sources)
    except ValueError as e:
        print(f"sass_batches: {e}")
        return 2
    if not sites:
        print(f"sass_batches: no load marked '// SASS batch: NAME' under {args.sources}")
        return 2
    found = {}
    for obj in args.objects:
        text = disassemble(obj, cuobjdump, nvdisasm)
        if text is None:
            return 2
        for mangled, figures in analyse(text, sites).items():
            found[short_name(mangled)] = figures
    with tempfile.TemporaryDirectory() as tmp:
        table = os.path.join(tmp, "model.json")
        done = subprocess.run(
            [args.bench, "--model-table", f"--json={table}"], capture_output=True, text=True
        )
        if done.returncode not in (0, 1):  # 1: a row misses its time target, not this check's
            print(f"sass_batches: {args.bench} --model-table failed:\n{done.stderr}")
            return 2
        rows = json.load(open(table))
    wanted = {}
    for row in rows:
        wanted[row["kernel"]] = max(wanted.get(row["kernel"], 0), row["largest_batch_bytes"])
    failed = 0
    print(f"{'kernel':44} {'model batch':>11} {'SASS run':>9}  marked loads in one run")
    for kernel, batch in sorted(wanted.items()):
        if kernel not in found:
            print(f"sass_batches: the model's kernel {kernel} is in none of the objects")
            return 2
        run, counts = found[kernel]
        serialized = sorted(f"{f}:{n}" for (f, n), c in counts.items() if c < sites[(f, n)])
        short = run < batch or bool(serialized)
        failed += short
        marks = (
            ", ".join(f"{f}:{n} x{c} (of {sites[(f, n)]})" for (f, n), c in sorted(counts.items()))
            or "none"
        )
        print(f"{kernel:44} {batch:9} B {run:7} B  {marks}{'  SHORT' if short else ''}")
        if serialized:
            print(f"  fewer loads in one run than the batch at {', '.join(serialized)}: not kept")
    print(
        f"sass_batches: {len(wanted) - failed} of {len(wanted)} kernels keep the model's batches "
        f"of loads in their SASS ({len(sites)} batched loads marked in the sources)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
