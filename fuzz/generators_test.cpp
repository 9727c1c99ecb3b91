// SPDX-License-Identifier: Apache-2.0
// The generators: every spec materializes into a case the reference accepts, the edge sizes
// come up often, faults raise their status bits, specs survive JSON, and a failing
// property shrinks to a small description.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "backends/case_run.h"
#include "checks/compare.h"
#include "fuzz/generators.h"
#include "mlarope/error.h"
#include "property_support.h"

using namespace mlarope;
using namespace mlarope::props;

namespace {

constexpr int kSpecs = 3000;

std::vector<CaseSpec> specs(int size, int count = kSpecs, const GenOptions& o = {}) {
  std::vector<CaseSpec> out;
  out.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) out.push_back(random_spec(1000 + i, size, o));
  return out;
}

template <class Pred>
double share(const std::vector<CaseSpec>& all, Pred pred) {
  int n = 0;
  for (const CaseSpec& s : all) n += pred(s) ? 1 : 0;
  return static_cast<double>(n) / static_cast<double>(all.size());
}

bool is_rope(Op op) { return op == Op::rope || op == Op::rope_backward; }

TEST(Generators, RandomSpecIsDeterministic) {
  EXPECT_EQ(to_json(random_spec(7, 100)), to_json(random_spec(7, 100)));
  EXPECT_NE(to_json(random_spec(7, 100)), to_json(random_spec(8, 100)));
}

TEST(Generators, EverySpecMaterializesIntoACaseTheReferenceAccepts) {
  for (int size : {0, 10, 50, 100, 400}) {
    for (const CaseSpec& s : specs(size, 400)) {
      SCOPED_TRACE(describe(s));
      const harness::Case c = materialize(s);
      EXPECT_NO_THROW(harness::run_case(c, harness::reference_backend()));
      EXPECT_EQ(c.arrays.at("cos").shape[0], table_rows(s));
      if (s.fault == MetadataFault::none && s.layout == TokenLayout::thd && s.cp_size > 1) {
        for (std::int64_t l : s.seq_lengths) EXPECT_EQ(l % (2 * s.cp_size), 0);
      }
      EXPECT_TRUE(!s.in_place || is_rope(s.op));
      EXPECT_LT(s.cp_rank, s.cp_size);
    }
  }
}

TEST(Generators, EdgeSizesComeUpOften) {
  const std::vector<CaseSpec> all = specs(kDefaultSize);
  auto thd = [](const CaseSpec& s) { return s.layout == TokenLayout::thd; };
  EXPECT_GT(share(all,
                  [](const CaseSpec& s) {
                    return std::set<std::int64_t>{1, 3, 5, 7, 12, 20}.count(s.heads) > 0;
                  }),
            0.3);
  EXPECT_GT(share(all, [](const CaseSpec& s) { return s.heads == 0; }), 0.02);
  EXPECT_GT(share(all, [](const CaseSpec& s) { return s.heads > 64; }), 0.03);
  // More than 1024 lanes of emb_dim / 2 per token, at the sizes adapters fuzz with too.
  const auto wide = [](const CaseSpec& s) { return s.heads * (s.emb_dim / 2) > 1024; };
  EXPECT_GT(share(all, wide), 0.02);
  EXPECT_GT(share(specs(8), wide), 0.02);
  EXPECT_GT(share(all, [](const CaseSpec& s) { return s.emb_dim == 64; }), 0.2);
  EXPECT_GT(share(all,
                  [](const CaseSpec& s) {
                    return std::set<std::int64_t>{2, 6, 10, 50}.count(s.emb_dim) > 0;
                  }),
            0.2);
  EXPECT_GT(share(all, [](const CaseSpec& s) { return s.emb_dim > 128; }), 0.05);
  EXPECT_GT(share(all, [](const CaseSpec& s) { return is_rope(s.op) && s.nope_dim == 0; }), 0.08);
  EXPECT_GT(share(all, [](const CaseSpec& s) { return !is_rope(s.op) && s.k_dim == 0; }), 0.06);
  EXPECT_GT(share(all, [](const CaseSpec& s) { return !is_rope(s.op) && s.v_dim == 0; }), 0.06);
  EXPECT_GT(share(all, [](const CaseSpec& s) { return row_count(s) == 0; }), 0.03);
  EXPECT_GT(share(all, [](const CaseSpec& s) { return row_count(s) == 1; }), 0.03);
  EXPECT_GT(share(all, [](const CaseSpec& s) { return s.plan.head_gap > 0; }), 0.3);
  EXPECT_GT(share(all, [](const CaseSpec& s) { return s.cp_size > 1; }), 0.3);
  EXPECT_GT(share(all, [&](const CaseSpec& s) { return thd(s) && s.seq_lengths.size() == 1; }),
            0.05);
  EXPECT_GT(share(all, [&](const CaseSpec& s) { return thd(s) && s.seq_lengths.size() >= 8; }),
            0.05);
  EXPECT_GT(share(all, [&](const CaseSpec& s) { return thd(s) && s.padding_rows > 0; }), 0.1);
  EXPECT_GT(share(all,
                  [&](const CaseSpec& s) {
                    return thd(s) && std::count(s.seq_lengths.begin(), s.seq_lengths.end(), 0) > 0;
                  }),
            0.1);
  EXPECT_GT(share(all, [](const CaseSpec& s) { return s.fault != MetadataFault::none; }), 0.05);
  EXPECT_GT(share(all, [](const CaseSpec& s) { return s.in_place; }), 0.1);
  // SBHD batch entries reading different rows (offsets of two entries or more), as a batch
  // with Hugging Face's per-entry position_ids does, at the sizes adapters fuzz with too.
  const auto per_entry_rows = [](const CaseSpec& s) {
    return s.layout == TokenLayout::sbhd && s.seq_offsets && s.batch >= 2 && s.seq >= 1;
  };
  EXPECT_GT(share(all, per_entry_rows), 0.05);
  EXPECT_GT(share(specs(8), per_entry_rows), 0.04);
  for (Values v : {Values::large, Values::tiny, Values::signed_zeros, Values::cancelling,
                   Values::ties, Values::nan_payloads})
    EXPECT_GT(share(all, [v](const CaseSpec& s) { return s.values == v; }), 0.05) << to_string(v);
}

TEST(Generators, DefaultSizeCasesAreSmall) {
  std::int64_t elements = 0;
  const std::vector<CaseSpec> all = specs(kDefaultSize, 1000);
  for (const CaseSpec& s : all) {
    const harness::Case c = materialize(s);
    for (const auto& [name, a] : c.arrays)
      if (name != "cos" && name != "sin") elements += a.size();
  }
  EXPECT_LT(elements / 1000, 20000) << "mean input elements per case";
}

TEST(Generators, OptionsRestrictWhatIsDrawn) {
  GenOptions o;
  o.ops = {Op::kv_split};
  o.layouts = {TokenLayout::sbhd};
  o.cp_sizes = {2, 4};
  o.batch_one = true;
  o.faults = false;
  o.triple = LayoutTriple{PairLayout::interleaved, PairLayout::interleaved, PairLayout::half};
  for (const CaseSpec& s : specs(kDefaultSize, 300, o)) {
    EXPECT_EQ(s.op, Op::kv_split);
    EXPECT_EQ(s.layout, TokenLayout::sbhd);
    EXPECT_TRUE(s.cp_size == 2 || s.cp_size == 4);
    EXPECT_EQ(s.batch, 1);
    EXPECT_EQ(s.seq % 2, 0);
    EXPECT_EQ(s.fault, MetadataFault::none);
    EXPECT_EQ(s.out_layout, PairLayout::interleaved);
  }
}

TEST(Generators, FaultsRaiseTheirStatusBits) {
  std::map<MetadataFault, int> seen;
  for (const CaseSpec& s : specs(kDefaultSize)) {
    if (s.fault == MetadataFault::none) continue;
    const harness::CaseOutputs o = harness::run_case(materialize(s), harness::reference_backend());
    SCOPED_TRACE(describe(s));
    // A call that writes no element is a no-op (docs/semantics.md §5): nothing runs to raise a bit.
    const bool writes_nothing =
        std::all_of(o.arrays.begin(), o.arrays.end(),
                    [](const auto& named) { return named.second.size() == 0; });
    if (writes_nothing) {
      EXPECT_EQ(o.status, kStatusOk);
      continue;
    }
    switch (s.fault) {
      case MetadataFault::bad_length: EXPECT_TRUE(o.status & kStatusBadSeqLength); break;
      case MetadataFault::decreasing:
      case MetadataFault::too_long: EXPECT_TRUE(o.status & kStatusBadCuSeqlens); break;
      case MetadataFault::row_outside_table:
        if (s.position_ids && row_count(s) > s.padding_rows) {
          EXPECT_TRUE(o.status & kStatusRowOutsideTable);
        }
        break;
      case MetadataFault::none: break;
    }
    ++seen[s.fault];
  }
  EXPECT_EQ(seen.size(), 4u);
}

TEST(Generators, LargeValuesStayFinite) {
  int checked = 0;
  for (const CaseSpec& s : specs(kDefaultSize)) {
    if (s.values != Values::large) continue;
    const harness::CaseOutputs o = harness::run_case(materialize(s), harness::reference_backend());
    for (const auto& [name, a] : o.arrays)
      for (std::int64_t i = 0; i < a.size(); ++i)
        ASSERT_TRUE(std::isfinite(harness::value_at(a, s.dtype, i))) << describe(s) << " " << name;
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

TEST(Generators, SpecsSurviveJson) {
  for (const CaseSpec& s : specs(kDefaultSize, 200))
    EXPECT_EQ(to_json(spec_from_json(to_json(s))), to_json(s));
  EXPECT_THROW(spec_from_json(nlohmann::json{{"op", "rope"}}), Error);
}

// A listener that keeps quiet: this test fails a property on purpose.
struct Quiet : rc::detail::TestListener {
  void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
  void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
};

TEST(Generators, AFailingPropertyShrinksToASmallDescription) {
  static CaseSpec last;
  const auto property = [] {
    const CaseSpec s = *case_spec();
    if (s.op == Op::kv_split && s.heads >= 5) {
      last = s;
      RC_FAIL("too many heads");
    }
  };
  rc::detail::TestMetadata metadata;
  metadata.id = "shrink";
  rc::detail::TestParams params;
  params.seed = 3;
  params.maxSuccess = 500;
  Quiet quiet;
  const auto result = rc::detail::checkTestable(property, metadata, params, quiet);
  ASSERT_TRUE(result.template is<rc::detail::FailureResult>());
  EXPECT_EQ(last.heads, 5) << describe(last);
  EXPECT_EQ(row_count(last), 0) << describe(last);
  EXPECT_EQ(last.k_dim, 0) << describe(last);
  EXPECT_EQ(last.emb_dim, 2) << describe(last);
}

}  // namespace
