# SPDX-License-Identifier: Apache-2.0
"""Races in a Triton launch, found from the global accesses Triton's interpreter makes.

The interpreter runs a launch's programs one after another and each tile operation of a
program whole, so a kernel whose result depends on the order of its accesses passes there and
fails on a GPU, which runs programs in any order and a tile's elements on different threads.
While a launch runs, every load, store and atomic is recorded: its addresses and bytes, the
program, the element's index in its tile, the program's barrier epoch (``tl.debug_barrier()``
starts a new one) and the kernel's source line. When the launch ends two rules are checked:

- **between programs**: a byte one program stores that another program loads or stores
  (atomics aside): nothing orders two programs of one launch;
- **within a program**: a byte that a store writes and a load reads in the same epoch, where
  two different tile elements are involved, in either order: nothing orders two threads of a
  program between barriers.

What it cannot see: the element-to-thread map is the tile's flat index, as Triton's blocked
layouts give for tiles of one shape; where the compiler lays two tiles of different shapes
out so that one thread holds both elements, the pair is reported though a GPU orders it.
Shared memory the compiler introduces (layout conversions, pipelining) and warp
specialisation are invisible here: the rules see global memory only.
"""

from __future__ import annotations

import os
import sys

import numpy as np

LOAD, STORE, ATOMIC = 0, 1, 2  # what an access does
_KIND_NAME = {LOAD: "loads", STORE: "stores", ATOMIC: "updates atomically"}


class RaceFound(AssertionError):
    """A launch's accesses race: the message names the check ("races"), the kernel, the
    tensor, the programs and elements, and both source lines."""


def _kernel_line(skip_dirs) -> str:
    """file:line of the innermost frame outside Triton and this package: the kernel's source."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not any(name.startswith(d) for d in skip_dirs):
            return f"{os.path.basename(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


class LaunchRecord:
    """The accesses of one launch of ``kernel``; ``tensors`` maps a name to its byte range
    [lo, hi) so that a report can name what a racing byte belongs to."""

    def __init__(self, kernel: str, tensors: dict, skip_dirs):
        self.kernel = kernel
        self.tensors = tensors
        self.skip_dirs = skip_dirs
        self.program = (0, 0, 0)
        self.program_index = 0
        self.epoch = 0
        self.lines: list[str] = []
        self.programs: dict = {}  # step -> (x, y, z), for the reports
        self.parts: list[tuple] = []  # (addresses, elements, size, kind, program, epoch, access)

    def start_program(self, program, index: int) -> None:
        self.program, self.program_index, self.epoch = tuple(program), index, 0

    def barrier(self) -> None:
        self.epoch += 1

    def record(self, kind: int, ptrs: np.ndarray, mask, size: int) -> None:
        addresses = np.asarray(ptrs).reshape(-1).astype(np.uint64)
        if mask is None:
            elements = np.arange(addresses.size, dtype=np.int64)
        else:
            keep = np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(ptrs)).reshape(-1)
            elements = np.flatnonzero(keep).astype(np.int64)
            addresses = addresses[elements]
        if addresses.size == 0:
            return
        access = len(self.lines)
        self.lines.append(_kernel_line(self.skip_dirs))
        self.parts.append((addresses, elements, size, kind, self.program_index, self.epoch, access))
        self.programs[self.program_index] = self.program

    # ---- the rules ------------------------------------------------------------------------

    def _bytes(self):
        """One row a byte: address, program, epoch, element, kind, access."""
        cols = [[], [], [], [], [], []]
        for addresses, elements, size, kind, program, epoch, access in self.parts:
            offs = np.arange(size, dtype=np.uint64)
            b = (addresses[:, None] + offs[None, :]).reshape(-1)
            n = b.size
            cols[0].append(b)
            cols[1].append(np.full(n, program, dtype=np.int64))
            cols[2].append(np.full(n, epoch, dtype=np.int64))
            cols[3].append(np.repeat(elements, size))
            cols[4].append(np.full(n, kind, dtype=np.int8))
            cols[5].append(np.full(n, access, dtype=np.int64))
        return [np.concatenate(c) for c in cols]

    def find(self) -> str | None:
        """The first race of the launch, described; None when there is none."""
        if not self.parts:
            return None
        byte, program, epoch, element, kind, access = self._bytes()
        plain = kind != ATOMIC
        found = self._between_programs(byte[plain], program[plain], kind[plain], access[plain])
        if found is None:
            found = self._within_a_program(
                byte[plain],
                program[plain],
                epoch[plain],
                element[plain],
                kind[plain],
                access[plain],
            )
        return found

    def _between_programs(self, byte, program, kind, access):
        order = np.lexsort((program, byte))
        byte, program, kind, access = byte[order], program[order], kind[order], access[order]
        stores = kind == STORE
        # Per byte: how many programs touch it and whether any stores it.
        starts = np.flatnonzero(np.r_[True, byte[1:] != byte[:-1]])
        first_program = np.repeat(program[starts], np.diff(np.r_[starts, byte.size]))
        other = program != first_program
        byte_has_other = np.maximum.reduceat(other.astype(np.int8), starts) > 0
        byte_has_store = np.maximum.reduceat(stores.astype(np.int8), starts) > 0
        racing = np.flatnonzero(byte_has_other & byte_has_store)
        if racing.size == 0:
            return None
        lo = starts[racing[0]]
        hi = starts[racing[0] + 1] if racing[0] + 1 < starts.size else byte.size
        rows = np.arange(lo, hi)
        store = rows[stores[rows]][0]
        others = rows[program[rows] != program[store]]
        second = others[0]
        return self._describe(
            "between programs",
            int(byte[store]),
            (program[store], None, STORE, access[store]),
            (program[second], None, kind[second], access[second]),
        )

    def _within_a_program(self, byte, program, epoch, element, kind, access):
        order = np.lexsort((element, byte, epoch, program))
        byte, program, epoch, element, kind, access = (
            a[order] for a in (byte, program, epoch, element, kind, access)
        )
        key_change = np.r_[
            True,
            (byte[1:] != byte[:-1]) | (program[1:] != program[:-1]) | (epoch[1:] != epoch[:-1]),
        ]
        starts = np.flatnonzero(key_change)
        ends = np.r_[starts[1:], byte.size]
        loads = (kind == LOAD).astype(np.int8)
        stores = (kind == STORE).astype(np.int8)
        has_load = np.maximum.reduceat(loads, starts) > 0
        has_store = np.maximum.reduceat(stores, starts) > 0
        first_element = np.repeat(element[starts], ends - starts)
        other = (element != first_element).astype(np.int8)
        has_other = np.maximum.reduceat(other, starts) > 0
        racing = np.flatnonzero(has_load & has_store & has_other)
        if racing.size == 0:
            return None
        rows = np.arange(starts[racing[0]], ends[racing[0]])
        for s in rows[kind[rows] == STORE]:
            partners = rows[(kind[rows] == LOAD) & (element[rows] != element[s])]
            if partners.size == 0:  # a store by another element than the loads' one
                partners = rows[(kind[rows] != LOAD) & (element[rows] != element[s])]
            if partners.size:
                p = partners[0]
                return self._describe(
                    f"within program {self.programs[int(program[s])]} in one barrier epoch",
                    int(byte[s]),
                    (program[s], element[s], STORE, access[s]),
                    (program[p], element[p], kind[p], access[p]),
                )
        return None

    def _describe(self, where: str, address: int, first, second) -> str:
        tensor, offset = "an address outside the call's tensors", None
        for name, (lo, hi) in self.tensors.items():
            if lo <= address < hi:
                tensor, offset = f"tensor '{name}'", address - lo
                break
        at = f"{tensor}" + (f", byte {offset}" if offset is not None else f" 0x{address:x}")

        def side(p):
            program, element, kind, access = p
            who = f"program {self.programs[int(program)]}"
            if element is not None:
                who += f" element {int(element)}"
            return f"{who} {_KIND_NAME[int(kind)]} it at {self.lines[int(access)]}"

        return (
            f"races: kernel {self.kernel}, {where}: {at}: {side(first)}; {side(second)} "
            "(nothing orders them on a GPU)"
        )
