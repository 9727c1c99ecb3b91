#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Self-test of ci/coverage.py: the merging over instantiations, the exclusions and the gate,
on hand-made gcov JSON (run by CTest as coverage_tool_selftest)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coverage  # noqa: E402  (ci/coverage.py)

HEADER = os.path.join(coverage.ROOT, "cuda/kernels/example.h")


def line(number, count, branches, function=None):
    out = {
        "line_number": number,
        "count": count,
        "branches": [{"count": c, "throw": False, "fallthrough": False} for c in branches],
    }
    if function:
        out["function_name"] = function
    return out


def doc(lines, functions=(), path=HEADER):
    return {"files": [{"file": path, "lines": lines, "functions": list(functions)}]}


def summary(docs, source):
    rows, errors, listed = coverage.summarize(coverage.merge(docs), lambda rel: source)
    return rows["cuda/kernels/example.h"], errors, listed


class Merge(unittest.TestCase):
    def test_a_branch_taken_by_one_instantiation_is_covered(self):
        r, _, _ = summary(
            [doc([line(3, 5, [5, 0], "f<float>"), line(3, 3, [0, 3], "f<Half>")])], [""] * 5
        )
        self.assertEqual((r["branches_covered"], r["branches_total"]), (2, 2))

    def test_an_outcome_no_instantiation_takes_is_uncovered(self):
        r, _, _ = summary(
            [doc([line(3, 5, [5, 0], "f<float>"), line(3, 3, [3, 0], "f<Half>")])], [""] * 5
        )
        self.assertEqual((r["branches_covered"], r["branches_total"]), (1, 2))
        self.assertTrue(r["uncovered_branches"][0].startswith("3: outcomes 1 of 2"))

    def test_forms_of_a_line_are_counted_apart(self):
        r, _, _ = summary(
            [doc([line(3, 1, [1, 1, 0, 0], "f<float>"), line(3, 1, [1, 1], "f<Half>")])], [""] * 5
        )
        self.assertEqual((r["branches_covered"], r["branches_total"]), (4, 6))

    def test_a_lambda_line_is_split_by_its_instantiations(self):
        functions = [
            {"start_line": 1, "end_line": 9},
            {"start_line": 4, "end_line": 4},
            {"start_line": 4, "end_line": 4},
        ]
        r, _, _ = summary([doc([line(4, 3, [1, 0, 0, 2])], functions)], [""] * 9)
        self.assertEqual((r["branches_covered"], r["branches_total"]), (2, 2))

    def test_exception_edges_and_other_files_are_not_counted(self):
        thrown = line(3, 1, [1, 0])
        thrown["branches"][1]["throw"] = True
        files = coverage.merge(
            [
                doc([thrown]),
                doc([line(3, 0, [])], path=os.path.join(coverage.ROOT, "cuda/tests/x_test.cpp")),
                doc([line(3, 0, [])], path=os.path.join(coverage.ROOT, "harness/x.cpp")),
            ]
        )
        self.assertEqual(list(files), ["cuda/kernels/example.h"])
        self.assertEqual(files["cuda/kernels/example.h"][3]["forms"], {1: [1]})

    def test_a_line_never_run_is_uncovered(self):
        r, _, _ = summary([doc([line(2, 0, []), line(3, 4, [])])], [""] * 5)
        self.assertEqual((r["lines_covered"], r["lines_total"], r["uncovered_lines"]), (1, 2, [2]))


class Exclusions(unittest.TestCase):
    def test_a_branch_exclusion_keeps_the_line_and_drops_its_branches(self):
        source = ["", "", "x;  // GCOVR_EXCL_BR_LINE: the guard no input reaches", "", ""]
        r, errors, listed = summary([doc([line(3, 2, [2, 0], "f")])], source)
        self.assertEqual(errors, [])
        self.assertEqual((r["lines_total"], r["branches_total"]), (1, 0))
        self.assertEqual(
            listed, ["cuda/kernels/example.h:3: branches excluded: the guard no input reaches"]
        )

    def test_a_block_excludes_its_lines(self):
        source = ["// GCOVR_EXCL_START: debug only", "a;", "// GCOVR_EXCL_STOP", "b;"]
        r, errors, _ = summary([doc([line(2, 0, [0, 0], "f"), line(4, 1, [], "f")])], source)
        self.assertEqual(errors, [])
        self.assertEqual((r["lines_covered"], r["lines_total"], r["branches_total"]), (1, 1, 0))

    def test_a_marker_without_a_reason_or_a_stop_is_an_error(self):
        _, errors, _ = summary(
            [doc([line(1, 1, [])])], ["x;  // GCOVR_EXCL_LINE", "// GCOVR_EXCL_BR_START: why"]
        )
        self.assertEqual(len(errors), 2)
        self.assertIn("without a reason", errors[0])
        self.assertIn("without its STOP", errors[1])


class Gate(unittest.TestCase):
    def test_a_drop_a_missing_file_and_a_new_file_fail(self):
        base = {
            "a.h": {"lines": 100.0, "branches": 100.0},
            "b.h": {"lines": 100.0, "branches": 100.0},
        }
        self.assertEqual(
            coverage.below_baseline(
                {
                    "a.h": {"lines": 100.0, "branches": 99.6},
                    "b.h": {"lines": 100.0, "branches": 100.0},
                },
                base,
            ),
            [],
        )
        drops = coverage.below_baseline(
            {"a.h": {"lines": 100.0, "branches": 99.4}, "c.h": {"lines": 100.0, "branches": 100.0}},
            base,
        )
        self.assertEqual(len(drops), 3, drops)


if __name__ == "__main__":
    unittest.main(verbosity=1)
