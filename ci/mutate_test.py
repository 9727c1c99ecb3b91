#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Self-test of ci/mutate.py and its package ci/mutation/ (CTest `mutate_tool_selftest`): site
finding, the preprocessor and scanner corners, sampling, shards, the equivalent-mutant file,
the kill-rate arithmetic, diffs, summaries, merges, one mutant's build-and-check step (with a
stand-in build) and the command line. No build: it runs in about a second.

    python3 ci/mutate_test.py        (or: python3 -m unittest discover -s ci -p 'mutate_test.py')
"""

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from argparse import Namespace
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mutation import cli  # noqa: E402
from mutation.campaign import Campaign  # noqa: E402
from mutation.checks import Check, fault_anchor_spans, parse_checks, touches_anchor  # noqa: E402
from mutation.common import UsageError  # noqa: E402
from mutation.equivalents import (
    classify_with_equivalents,
    equivalents_by_key,  # noqa: E402
    parse_equivalents,
)
from mutation.mask import code_mask  # noqa: E402
from mutation.report import kill_rate, summary_markdown, tally, verdict  # noqa: E402
from mutation.sampling import sample_sites, shard_of  # noqa: E402
from mutation.sites import (
    SOURCE_GLOBS,
    all_sites,
    apply_site,
    find_sites,  # noqa: E402
    mutate_number,
    unified_diff,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sites_of(code, file="cuda/kernels/x.h"):
    return find_sites(file, code)


def changes(code):
    """(orig, repl) of every site of `code`, in text order."""
    return [(s.orig, s.repl) for s in sites_of(code)]


class SiteFinding(unittest.TestCase):
    def test_each_operator_is_applied(self):
        code = (
            "int f(int a, int b, bool c) {\n"
            "  if (a < b && !c) return a + b * 2;\n"
            "  if (a >= b || c == false) return a - b / 1;\n"
            "  return a <= b ? (a > b) : a != 0 ? 1.5f : 0.0;\n"
            "}\n"
        )
        found = changes(code)
        for expected in [
            (" < ", " <= "),
            (" && ", " || "),
            ("!", ""),
            (" + ", " - "),
            (" * ", " / "),
            ("2", "1"),
            (" >= ", " > "),
            (" || ", " && "),
            (" == ", " != "),
            ("false", "true"),
            (" - ", " + "),
            (" / ", " * "),
            ("1", "0"),
            (" <= ", " < "),
            (" > ", " >= "),
            (" != ", " == "),
            ("0", "1"),
            ("1.5f", "3.0f"),
            ("0.0", "1.0"),
        ]:
            self.assertIn(expected, found)
        for s in sites_of(code):  # every mutant is the original with one token changed
            mutated = apply_site(code, s)
            self.assertNotEqual(mutated, code)
            self.assertEqual(len(mutated) - len(code), len(s.repl.strip()) - len(s.orig.strip()))

    def test_comments_strings_chars_and_preprocessor_lines_are_skipped(self):
        code = (
            "// a + b < c\n"
            "/* x && y\n   || 2 */\n"
            "#define LIMIT (4 + 4)\n"
            '#include "a+b.h"\n'
            'const char* s = "a + b == 3";\n'
            "char c = '1';\n"
            'static_assert(sizeof(int) == 4, "ints are 4 bytes");\n'
            "int x = y + z;  // 1 - 2\n"
        )
        self.assertEqual(changes(code), [(" + ", " - ")])
        self.assertEqual(sites_of(code)[0].line, 9)

    def test_template_brackets_are_not_comparisons_and_their_arguments_are_not_sites(self):
        code = (
            "template <int K, class T>\n"
            "void f() {\n"
            "  load_vector<T, 2 * K>(p + 1, x);\n"
            "  auto y = std::max<std::int64_t>(1, n) * static_cast<int>(sizeof(T));\n"
            "  if (std::is_same_v<T, float> && K == 4) {}\n"
            "}\n"
        )
        found = changes(code)
        self.assertEqual(
            found,
            [
                (" + ", " - "),
                ("1", "0"),
                ("1", "0"),
                (" * ", " / "),
                (" && ", " || "),
                (" == ", " != "),
                ("4", "5"),
            ],
        )
        self.assertNotIn((" < ", " <= "), found)
        self.assertNotIn(("2", "1"), found)

    def test_unary_signs_pointers_and_arrows_are_not_binary_sites(self):
        code = "float a = -1.0f; T* p = q; x = p->y; y = (- b); z = b - c; w = c ? - d : e;\n"
        self.assertEqual(changes(code), [("1.0f", "2.0f"), (" - ", " + ")])

    def test_operators_at_line_ends_and_starts(self):
        code = "bool v = a == b &&\n         c != d\n         || e;\n"
        self.assertEqual(
            changes(code), [(" == ", " != "), (" && ", " || "), (" != ", " == "), (" || ", " && ")]
        )

    def test_literals(self):
        self.assertEqual(mutate_number("0"), ("int", "1"))
        self.assertEqual(mutate_number("1"), ("int", "0"))
        self.assertEqual(mutate_number("2"), ("int", "1"))
        self.assertEqual(mutate_number("16"), ("int", "17"))
        self.assertEqual(mutate_number("16ull"), ("int", "17ull"))
        self.assertEqual(mutate_number("0x7fffu"), ("int", "0x8000u"))
        self.assertEqual(mutate_number("0xFF"), ("int", "0x100"))
        self.assertEqual(mutate_number("0.5"), ("float", "1.0"))
        self.assertEqual(mutate_number("1e-3"), ("float", "0.002"))
        self.assertEqual(mutate_number("1.0f"), ("float", "2.0f"))
        # Identifiers holding digits are not literals; digit separators stay in one literal.
        self.assertEqual(changes("std::int64_t x = u8; int y = 1'000;\n"), [("1'000", "1001")])

    def test_device_only_code(self):
        code = (
            "#if defined(__CUDA_ARCH__)\n"
            "  a = b + c;\n"
            "#else\n"
            "  a = b - c;\n"
            "#endif\n"
            "#if !defined(__CUDA_ARCH__)\n"
            "  d = e * f;\n"
            "#endif\n"
            "#ifdef SOMETHING_ELSE\n"
            "  g = h / i;\n"
            "#endif\n"
            "#if defined(__CUDACC__)\n"
            "  j = k && l;\n"
            "#elif defined(X)\n"
            "  m = n || o;\n"
            "#endif\n"
        )
        only = {s.orig.strip(): s.device_only for s in sites_of(code)}
        self.assertEqual(
            only, {"+": True, "-": False, "*": False, "/": False, "&&": True, "||": False}
        )

    def test_positions_and_occurrences(self):
        code = "x = 1;\n  y = a + b + c;\n"
        sites = [s for s in sites_of(code) if s.orig == " + "]
        self.assertEqual([(s.line, s.col, s.occurrence) for s in sites], [(2, 9, 0), (2, 13, 1)])
        self.assertEqual(sites[0].id, "cuda/kernels/x.h:2:9")
        self.assertEqual(sites[0].text, "  y = a + b + c;")

    def test_the_real_sources_have_sites_and_each_applies(self):
        sites = all_sites(ROOT, SOURCE_GLOBS)
        files = {s.file for s in sites}
        for f in (
            "cuda/kernels/pair_rotation.h",
            "cuda/kernels/portability.h",
            "cuda/launch/launch_builder.cpp",
            "cuda/launch/dispatch.cpp",
            "cuda/launch/footprint.cpp",
        ):
            self.assertIn(f, files)
        for s in sites:  # each one applies to its file
            with open(os.path.join(ROOT, s.file)) as f:
                text = f.read()
            self.assertEqual(text[s.start : s.end], s.orig.strip(), s.id)


class Scanner(unittest.TestCase):
    """The corners of mask.py and preprocessor.py: #elif/#else chains, nesting, continued
    directives, raw strings, escapes and digit separators."""

    def test_elif_else_nesting_and_continued_conditions(self):
        code = (
            "#ifdef __CUDA_ARCH__\n"
            "  a = b + c;\n"
            "#elif defined(X)\n"
            "  a = b - c;\n"
            "#else\n"
            "  a = b * c;\n"
            "#endif\n"
            "#ifndef __CUDA_ARCH__\n"
            "  d = e / f;\n"
            "#if defined(__CUDACC__) && defined(Y)\n"
            "  g = h && i;\n"
            "#endif\n"
            "#else\n"
            "  j = k || l;\n"
            "#endif\n"
            "#if defined(Z)\n"
            "#elif defined(__CUDA_ARCH__)\n"
            "  m = n == o;\n"
            "#endif\n"
            "#if defined(__CUDA_ARCH__) \\\n"
            "    && defined(W)\n"
            "  p = q != r;\n"
            "#endif\n"
            "  s = t < u;\n"
        )
        only = {s.orig.strip(): s.device_only for s in sites_of(code)}
        # An unknown #elif after a false #if, and its #else, may be compiled: not device-only.
        # A known-false #elif after an unknown #if is device-only, as is a nested false #if.
        self.assertEqual(
            only,
            {
                "+": True,
                "-": False,
                "*": False,
                "/": False,
                "&&": True,
                "||": True,
                "==": True,
                "!=": True,
                "<": False,
            },
        )

    def test_raw_strings_escapes_and_digit_separators(self):
        code = (
            'auto s = R"x(a + b)" + c)x";\n'
            "char q = '\\''; int n = 1'000 + m;\n"
            'const char* t = "a\\" + b";\n'
            "x = y + z;\n"
        )
        self.assertEqual(
            [(s.line, s.orig, s.repl) for s in sites_of(code)],
            [(2, "1'000", "1001"), (2, " + ", " - "), (4, " + ", " - ")],
        )
        masked, device_only = code_mask(code)
        self.assertEqual(len(masked), len(code))
        self.assertEqual(
            [k for k, c in enumerate(masked) if c == "\n"],
            [k for k, c in enumerate(code) if c == "\n"],
        )
        self.assertEqual(device_only, [False] * len(code))


class Sampling(unittest.TestCase):
    def setUp(self):
        self.sites = sites_of("".join(f"a{k} = b + c * {k};\n" for k in range(50)))

    def test_the_same_seed_gives_the_same_sample(self):
        a = sample_sites(self.sites, 10, 7)
        b = sample_sites(self.sites, 10, 7)
        self.assertEqual([s.id for s in a], [s.id for s in b])
        self.assertEqual(len({s.id for s in a}), 10)
        self.assertNotEqual([s.id for s in a], [s.id for s in sample_sites(self.sites, 10, 8)])

    def test_a_count_past_the_sites_takes_them_all(self):
        self.assertEqual(
            sorted(s.id for s in sample_sites(self.sites, 10**6, 1)),
            sorted(s.id for s in self.sites),
        )

    def test_shards_split_the_sample_without_overlap(self):
        sample = sample_sites(self.sites, 25, 3)
        shards = [shard_of(sample, i, 4) for i in range(4)]
        numbers = sorted(n for shard in shards for n, _ in shard)
        self.assertEqual(numbers, list(range(1, 26)))
        self.assertEqual([n for n, _ in shards[1]], [2, 6, 10, 14, 18, 22])
        self.assertIs(shards[1][0][1], sample[1])


class Equivalents(unittest.TestCase):
    ENTRY = (
        "# comment\n"
        "file: cuda/kernels/x.h\n"
        "line: y = a + b + c;\n"
        "mutant: ' + ' -> ' - '\n"
        "occurrence: 1\n"
        "reason: c is always 0 here\n"
        "\n"
        "file: cuda/kernels/x.h\n"
        "line: x = 1;\n"
        "mutant: '1' -> '0'\n"
        "reason: x is never read\n"
    )

    def parse(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(text)
        try:
            return parse_equivalents(f.name)
        finally:
            os.remove(f.name)

    def test_keys_match_sites_whatever_their_line_number(self):
        entries = equivalents_by_key(self.parse(self.ENTRY))
        for code in ("x = 1;\n  y = a + b + c;\n", "// moved\n\nx = 1;\n\n  y = a + b + c;\n"):
            listed = [(s.orig, s.occurrence) for s in sites_of(code) if s.key() in entries]
            self.assertEqual(listed, [("1", 0), (" + ", 1)])

    def test_bad_entries_are_usage_errors(self):
        with self.assertRaises(UsageError):
            self.parse("file: a.h\nline: x;\nmutant: ' + ' -> ' - '\n")  # no reason
        with self.assertRaises(UsageError):
            self.parse("file: a.h\nline: x;\nmutant: + -> -\nreason: r\n")
        with self.assertRaises(UsageError):
            self.parse("file: a.h\nfile: b.h\n")

    def test_the_projects_file_parses_and_every_entry_matches_a_site(self):
        entries = parse_equivalents(os.path.join(ROOT, "ci", "mutants-equivalent.txt"))
        # An entry may name a file outside the default globs (a campaign run with --files).
        named = sorted({e["key"][0] for e in entries} - set(SOURCE_GLOBS))
        keys = {s.key() for s in all_sites(ROOT, SOURCE_GLOBS + named)}
        for e in entries:
            self.assertIn(e["key"], keys, f"{e['where']}: matches no site (the line changed?)")

    def test_a_survivor_listed_later_counts_as_equivalent_and_a_listed_kill_warns(self):
        entries = self.parse(self.ENTRY)
        mutants = [
            record(1, "survived", text="x = 1;", orig="1", repl="0"),
            record(2, "killed", text="  y = a + b + c;", orig=" + ", repl=" - ", occurrence=1),
            record(3, "survived", text="  y = a + b + c;", orig=" + ", repl=" - ", occurrence=0),
        ]
        warnings = classify_with_equivalents(mutants, entries)
        self.assertEqual([m["status"] for m in mutants], ["equivalent", "killed", "survived"])
        self.assertEqual(mutants[0]["reason"], "x is never read")
        self.assertEqual(len(warnings), 1)
        self.assertIn("the entry is wrong", warnings[0])


def record(
    n,
    status,
    text="a = b + c;",
    orig=" + ",
    repl=" - ",
    occurrence=0,
    check=None,
    file="cuda/kernels/x.h",
):
    return {
        "n": n,
        "id": f"{file}:{n}:7",
        "file": file,
        "line": n,
        "col": 7,
        "op": "arith",
        "orig": orig,
        "repl": repl,
        "text": text,
        "occurrence": occurrence,
        "status": status,
        "check": check or ("host_backend" if status in ("killed", "timeout") else None),
        "seconds": 10.0 + n,
        "build_seconds": 5.0,
        "diff": f"--- a/{file}\n+++ b/{file}\n@@ -1 +1 @@\n-x\n+y\n",
        "detail": "error: something" if status == "did-not-build" else "",
    }


class Arithmetic(unittest.TestCase):
    def test_kill_rate_counts_timeouts_as_kills_and_leaves_out_the_rest(self):
        mutants = [record(k, "killed") for k in range(1, 8)] + [
            record(8, "timeout"),
            record(9, "survived"),
            record(10, "survived"),
            record(11, "equivalent"),
            record(12, "did-not-build"),
        ]
        counts = tally(mutants)
        self.assertEqual(
            counts, {"killed": 7, "timeout": 1, "survived": 2, "equivalent": 1, "did-not-build": 1}
        )
        self.assertAlmostEqual(kill_rate(counts), 0.8)
        self.assertIsNone(kill_rate(tally([record(1, "equivalent")])))

    def test_verdict(self):
        mutants = [
            record(1, "killed"),
            record(2, "killed"),
            record(3, "killed"),
            record(4, "survived"),
        ]
        self.assertEqual(verdict(mutants, 0.0, False)[0], 0)
        self.assertEqual(verdict(mutants, 0.75, False)[0], 0)
        self.assertEqual(verdict(mutants, 0.76, False)[0], 1)
        self.assertEqual(verdict(mutants, 0.0, True)[0], 1)
        self.assertEqual(verdict(mutants[:3] + [record(4, "equivalent")], 0.95, True)[0], 0)


class Output(unittest.TestCase):
    def test_diff_shows_the_one_changed_line(self):
        before = "a\nb\nint x = y + z;\nc\nd\ne\n"
        site = [s for s in sites_of(before, "cuda/launch/f.cpp") if s.orig == " + "][0]
        diff = unified_diff("cuda/launch/f.cpp", before, apply_site(before, site))
        self.assertEqual(
            diff,
            "--- a/cuda/launch/f.cpp\n+++ b/cuda/launch/f.cpp\n"
            "@@ -1,5 +1,5 @@\n a\n b\n"
            "-int x = y + z;\n+int x = y - z;\n c\n d\n",
        )

    def test_summary_lists_survivors_with_diffs_and_ready_entries(self):
        results = {
            "config": {"command": "python3 ci/mutate.py --count 3"},
            "baseline": None,
            "mutants": [record(1, "killed"), record(2, "survived"), record(3, "did-not-build")],
        }
        text = summary_markdown(results)
        self.assertIn("**Kill rate: 50.0%**", text)
        self.assertIn("### 002 `cuda/kernels/x.h:2:7` ' + ' -> ' - '", text)
        self.assertIn("```diff\n--- a/cuda/kernels/x.h", text)
        self.assertIn("mutant: ' + ' -> ' - '", text)
        self.assertIn("## Did not build (1)", text)

    def test_merge_of_shards(self):
        with tempfile.TemporaryDirectory() as d:
            for index, ms in (
                (0, [record(1, "killed"), record(3, "survived")]),
                (1, [record(2, "killed")]),
            ):
                shard = os.path.join(d, "campaign", f"shard-{index:04d}")
                os.makedirs(shard)
                with open(os.path.join(shard, "results.json"), "w") as f:
                    json.dump({"mutants": ms, "baseline": None}, f)
            out = os.path.join(d, "merged")
            with contextlib.redirect_stdout(io.StringIO()):
                status = cli.main(
                    [
                        "merge",
                        os.path.join(d, "campaign"),
                        "--out",
                        out,
                        "--equivalents",
                        os.path.join(d, "none.txt"),
                        "--min-kill-rate",
                        "0.5",
                    ]
                )
            self.assertEqual(status, 0)
            with open(os.path.join(out, "results.json")) as f:
                merged = json.load(f)
            self.assertEqual([m["n"] for m in merged["mutants"]], [1, 2, 3])
            self.assertEqual(os.listdir(os.path.join(out, "survivors")), ["003.diff"])
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(
                    cli.main(
                        ["merge", os.path.join(d, "campaign"), "--out", out, "--require-explained"]
                    ),
                    1,
                )


class FakeBuild:
    """Stands in for the scratch build: a mutant builds unless it sets kBad to 4, and every
    target's file is this Python."""

    def __init__(self, source):
        self.dir = os.path.dirname(source)
        self.source = source
        self.builds = 0

    def build(self, targets):
        self.builds += 1
        with open(self.source) as f:
            if "kBad = 4" in f.read():
                return 1, "[1/2] CXX k.o\nFAILED: k.o\nk.h:1:18: error: kBad must be 3\n", 0.1
        return 0, "", 0.1

    def target_file(self, name):
        return sys.executable


CHECK_SCRIPT = """import sys
text = open(sys.argv[1]).read()
if "a - b" in text:
    print("noise\\nk.h: Failure\\nExpected: a + b")
    sys.exit(1)
"""


class MutantStep(unittest.TestCase):
    """One mutant through campaign.py with a stand-in build and check: built, checked, its
    status recorded and the original text written back."""

    CODE = "const int kBad = 3;\nint f(int a, int b) { return a + b * 7; }\n"

    def test_killed_survived_did_not_build_equivalent_and_resumed(self):
        with tempfile.TemporaryDirectory() as d:
            scratch = os.path.join(d, "scratch")
            source = os.path.join(scratch, "src", "cuda", "kernels", "k.h")
            os.makedirs(os.path.dirname(source))
            with open(source, "w") as f:
                f.write(self.CODE)
            script = os.path.join(d, "check.py")
            with open(script, "w") as f:
                f.write(CHECK_SCRIPT)
            sites = {s.orig.strip(): s for s in find_sites("cuda/kernels/k.h", self.CODE)}
            args = Namespace(
                root=d,
                scratch=scratch,
                run_equivalent=False,
                build_timeout=60,
                check_timeout=60,
                timeout_factor=5,
            )
            equivalents = [{"key": sites["7"].key(), "reason": "r", "where": "e.txt:1"}]
            campaign = Campaign(args, list(sites.values()), [], equivalents, os.path.join(d, "out"))
            campaign.build = FakeBuild(source)
            check = Check("script", ["python"], ["@python", "{check}", source], "a script")
            check.baseline_seconds = 0.0
            campaign.checks = [check]
            campaign.values = {"cases": d, "check": script, "run": campaign.run_dir}
            campaign.done = {
                (sites["*"].id, " * ", " / ", sites["*"].text): {
                    "n": 9,
                    "status": "killed",
                    "id": sites["*"].id,
                }
            }
            with contextlib.redirect_stdout(io.StringIO()):
                campaign.run_mutants(
                    [(1, sites["+"]), (2, sites["3"]), (3, sites["*"]), (4, sites["7"])]
                )
            by_n = {m["n"]: m for m in campaign.results["mutants"]}
            self.assertEqual(
                {n: m["status"] for n, m in by_n.items()},
                {1: "killed", 2: "did-not-build", 3: "killed", 4: "equivalent"},
            )
            self.assertEqual(by_n[1]["check"], "script")
            self.assertIn("exit status 1", by_n[1]["detail"])
            self.assertIn("Expected: a + b", by_n[1]["detail"])
            self.assertNotIn("noise", by_n[1]["detail"])
            self.assertEqual(by_n[2]["detail"], "k.h:1:18: error: kBad must be 3")
            self.assertEqual(by_n[4]["reason"], "r")
            self.assertEqual(campaign.build.builds, 2)  # neither the resumed nor the listed one
            with open(source) as f:
                self.assertEqual(f.read(), self.CODE)
            with open(os.path.join(d, "out", "results.json")) as f:
                self.assertEqual(len(json.load(f)["mutants"]), 4)
            campaign.done = {}
            with contextlib.redirect_stdout(io.StringIO()):
                campaign.run_mutants([(5, sites["*"])])
            self.assertEqual(campaign.results["mutants"][-1]["status"], "survived")
            self.assertEqual(campaign.results["mutants"][-1]["check_seconds"].keys(), {"script"})


class FaultAnchors(unittest.TestCase):
    def test_a_mutant_inside_an_anchor_is_recognised(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "cuda", "test_support"))
            os.makedirs(os.path.join(d, "cuda", "kernels"))
            code = "int f() {\n  if (lo < hi) lo = mid;\n  return lo + 1;\n}\n"
            with open(os.path.join(d, "cuda", "kernels", "k.h"), "w") as f:
                f.write(code)
            with open(os.path.join(d, "cuda", "test_support", "kernel_faults.txt"), "w") as f:
                f.write("fault: x\nfile: kernels/k.h\nexpression: lo < hi\nbecomes: lo <= hi\n")
            spans = fault_anchor_spans(d)
            touched = {
                s.orig.strip(): touches_anchor(s, spans)
                for s in find_sites("cuda/kernels/k.h", code)
            }
            self.assertEqual(touched, {"<": True, "+": False, "1": False})


class CommandLine(unittest.TestCase):
    def run_main(self, argv):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            status = cli.main(argv)
        return status, out.getvalue()

    def test_list_sites_and_dry_run(self):
        status, out = self.run_main(["--list-sites"])
        self.assertEqual(status, 0)
        self.assertIn("sites per operator:", out)
        status, out = self.run_main(["--count", "5", "--seed", "2", "--dry-run"])
        self.assertEqual(status, 0)
        self.assertEqual(len(out.strip().splitlines()), 5)
        status, again = self.run_main(["--count", "5", "--seed", "2", "--dry-run"])
        self.assertEqual(out, again)

    def test_bad_usage_is_status_2(self):
        self.assertEqual(self.run_main([])[0], 2)
        self.assertEqual(self.run_main(["--sites", "cuda/kernels/nope.h:1:1", "--dry-run"])[0], 2)
        self.assertEqual(self.run_main(["--count", "3", "--checks", "nonsense", "--dry-run"])[0], 2)
        self.assertEqual(
            [c.name for c in parse_checks("dispatch,gtest:x_test:A.*,fuzz")],
            ["dispatch", "gtest:x_test:A.*", "fuzz"],
        )

    def test_cases_dir_defaults_to_the_repositorys_data(self):
        seen = []

        def campaign(args, sites, sample, equivalents, out_dir):
            seen.append(args.cases_dir)
            return {"mutants": []}

        with (
            tempfile.TemporaryDirectory() as d,
            mock.patch.object(cli, "run_campaign", campaign),
            mock.patch.dict(os.environ),
        ):
            os.environ.pop("MLAROPE_CASES_DIR", None)
            self.assertEqual(self.run_main(["--count", "1", "--out", d])[0], 0)
            os.environ["MLAROPE_CASES_DIR"] = "/elsewhere"
            self.run_main(["--count", "1", "--out", d])
            self.run_main(["--count", "1", "--out", d, "--cases-dir", "given"])
        self.assertEqual(seen, [os.path.join(ROOT, "data", "megatron"), "/elsewhere", "given"])

    def test_the_command_is_ci_mutate_py(self):
        for argv, says in (
            (["--help"], "usage: ci/mutate.py [-h]"),
            (["merge", "--help"], "usage: ci/mutate.py merge"),
            (["--list-checks"], "* dispatch"),
        ):
            done = subprocess.run(
                [sys.executable, os.path.join(ROOT, "ci", "mutate.py")] + argv,
                capture_output=True,
                text=True,
            )
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn(says, done.stdout)


if __name__ == "__main__":
    unittest.main()
