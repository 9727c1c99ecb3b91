// SPDX-License-Identifier: Apache-2.0
// Invalid device metadata (docs/semantics.md §5): the status word is set, the affected rows pass
// through, nothing is read or written out of bounds (run under the sanitizer build too).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "test_support/backend_cases.h"

namespace mlarope::test {
namespace {

class MetadataBackendTest : public BackendTest {};

RopeCase thd_case(std::vector<std::int64_t> cu, std::int64_t rows, std::int64_t cp_size = 1) {
  RopeCase c;
  c.rows.layout = TokenLayout::thd;
  c.rows.cu_seqlens = std::move(cu);
  c.rows.thd_rows = rows;
  c.rows.cp_size = cp_size;
  c.rows.table_rows = 64;
  return c;
}

// Each case under every rope-family call; the status must equal the reference's.
void expect_all_calls(RopeCase c, BackendKind backend, DeviceStatus expected) {
  for (bool backward : {false, true})
    for (bool in_place : {false, true}) {
      c.backward = backward;
      c.in_place = in_place;
      RopeHarness h(c, 3);
      h.upload(backend);
      Stream stream = backend == BackendKind::host ? Stream::host({9, 2}) : Stream::cuda();
      h.run_backend(stream);
      stream.synchronize();
      h.download();
      h.run_reference();
      EXPECT_TRUE(outputs_match(h.checks())) << c.name;
      EXPECT_EQ(h.backend_status(), expected)
          << c.name << ": " << describe_status(h.backend_status());
      EXPECT_EQ(h.reference_status(), expected) << c.name << " (reference)";
    }
}

TEST_P(MetadataBackendTest, DecreasingCuSeqlensPassEveryRowThrough) {
  RopeCase c = thd_case({0, 8, 4, 12}, 12);
  c.name = "decreasing cu_seqlens";
  expect_all_calls(c, backend(), kStatusBadCuSeqlens);
}

TEST_P(MetadataBackendTest, LengthsNotDivisibleByTwiceCpSize) {
  RopeCase c = thd_case({0, 8, 14}, 7, 2);
  c.name = "length 6 with cp_size 2";
  expect_all_calls(c, backend(), kStatusBadSeqLength);
}

TEST_P(MetadataBackendTest, SequencesLongerThanTheRows) {
  RopeCase c = thd_case({0, 8, 16}, 4);
  c.name = "16 tokens in 4 rows";
  expect_all_calls(c, backend(), kStatusBadCuSeqlens);
}

TEST_P(MetadataBackendTest, TotalLengthRuleOnlyWhenThePerSequenceRulesHold) {
  RopeCase c = thd_case({0, 8, 14, 30}, 4, 2);
  c.name = "length 6 with cp 2 and too many tokens";
  expect_all_calls(c, backend(), kStatusBadSeqLength);
  RopeCase d = thd_case({0, 8, 4, 40}, 4);
  d.name = "decreasing and too many tokens";
  expect_all_calls(d, backend(), kStatusBadCuSeqlens);
}

TEST_P(MetadataBackendTest, ExtremeCuSeqlensValuesStayInBounds) {
  const std::int64_t max = std::numeric_limits<std::int32_t>::max();
  const std::int64_t min = std::numeric_limits<std::int32_t>::min();
  RopeCase c = thd_case({0, max}, 6);
  c.name = "INT32_MAX tokens";
  expect_all_calls(c, backend(), kStatusBadCuSeqlens);
  RopeCase d = thd_case({min, 0, max}, 6);
  d.name = "INT32_MIN to INT32_MAX";
  expect_all_calls(d, backend(), kStatusBadCuSeqlens);
  RopeCase e = thd_case({max, min}, 6);
  e.name = "INT32_MAX then INT32_MIN";
  expect_all_calls(e, backend(), kStatusBadCuSeqlens);
}

TEST_P(MetadataBackendTest, NonZeroFirstCuSeqlensIsAValidOffset) {
  RopeCase c = thd_case({5, 9, 15}, 12);
  c.rows.freq_mode = FreqMode::packed;
  c.name = "cu_seqlens from 5, packed, padding rows";
  expect_all_calls(c, backend(), kStatusOk);
}

TEST_P(MetadataBackendTest, PositionIdsOutsideTheTablePassThroughAlone) {
  RopeCase c = thd_case({0, 5, 9}, 11);
  c.rows.position_ids = IndexType::i64;
  c.name = "position ids outside the table";
  for (bool backward : {false, true}) {
    c.backward = backward;
    RopeHarness h(c, 4);
    std::vector<std::int64_t> ids = h.metadata().position_ids().values();
    ids[0] = -1;
    ids[3] = 64;  // == table rows
    ids[7] = std::numeric_limits<std::int64_t>::max();
    ids[10] = 9;  // a padding row: passes through whatever its id
    h.metadata().position_ids().assign(ids);
    h.upload(backend());
    Stream stream = make_stream();
    h.run_backend(stream);
    stream.synchronize();
    h.download();
    h.run_reference();
    EXPECT_TRUE(outputs_match(h.checks()));
    EXPECT_EQ(h.backend_status(), kStatusRowOutsideTable);
    EXPECT_EQ(h.reference_status(), kStatusRowOutsideTable);
  }
}

TEST_P(MetadataBackendTest, OffsetsPushingRowsOutsideTheTable) {
  RopeCase sbhd;
  sbhd.rows.seq = 6;
  sbhd.rows.batch = 3;
  sbhd.rows.seq_offsets = true;
  sbhd.rows.table_rows = 7;  // offsets in [0, 4): some rows fall outside
  sbhd.name = "sbhd offsets past the table";
  RopeCase thd = thd_case({0, 6, 8}, 8);
  thd.rows.seq_offsets = true;
  thd.rows.table_rows = 7;
  thd.name = "thd offsets past the table";
  for (const RopeCase& c : {sbhd, thd}) {
    RopeHarness h(c, 11);
    h.upload(backend());
    Stream stream = make_stream();
    h.run_backend(stream);
    stream.synchronize();
    h.download();
    h.run_reference();
    EXPECT_TRUE(outputs_match(h.checks())) << c.name;
    EXPECT_EQ(h.backend_status(), h.reference_status()) << c.name;
  }
}

TEST_P(MetadataBackendTest, StatusWordAccumulatesAndOldBitsDoNotPassRowsThrough) {
  RopeCase c = thd_case({0, 4, 10}, 12);
  c.name = "preset status";
  RopeHarness h(c, 2);
  h.upload(backend());
  h.preset_status(kStatusBadSeqLength);
  Stream stream = make_stream();
  h.run_backend(stream);
  stream.synchronize();
  h.download();
  h.run_reference();
  EXPECT_TRUE(outputs_match(h.checks()));
  EXPECT_EQ(h.backend_status(), kStatusBadSeqLength);
}

TEST_P(MetadataBackendTest, ABadCallDoesNotLeakIntoTheNextCallOfTheStream) {
  RopeCase bad = thd_case({0, 8, 4, 12}, 12);
  RopeCase good = thd_case({0, 4, 10}, 12);
  RopeHarness first(bad, 1), second(good, 2);
  first.upload(backend());
  second.upload(backend());
  Stream stream = make_stream();
  first.run_backend(stream);
  second.run_backend(stream);
  stream.synchronize();
  first.download();
  second.download();
  first.run_reference();
  second.run_reference();
  EXPECT_TRUE(outputs_match(first.checks()));
  EXPECT_TRUE(outputs_match(second.checks()));
  EXPECT_EQ(first.backend_status(), kStatusBadCuSeqlens);
  EXPECT_EQ(second.backend_status(), kStatusOk);
}

TEST_P(MetadataBackendTest, KvSplitPassesInvalidRowsThrough) {
  for (bool backward : {false, true}) {
    KvCase c;
    c.rows.layout = TokenLayout::thd;
    c.rows.cu_seqlens = {0, 6, 3, 9};
    c.rows.thd_rows = 9;
    c.rows.table_rows = 32;
    c.backward = backward;
    c.name = std::string("kv_split decreasing cu_seqlens") + (backward ? " backward" : "");
    EXPECT_TRUE(check_kv_case(c, backend()));
    KvCase d;
    d.rows.seq_offsets = true;
    d.rows.table_rows = 7;
    d.backward = backward;
    d.name = std::string("kv_split offsets past the table") + (backward ? " backward" : "");
    EXPECT_TRUE(check_kv_case(d, backend()));
  }
}

TEST_P(MetadataBackendTest, ZeroHeadsStillReportTheStatus) {
  RopeCase c = thd_case({0, 8, 4, 12}, 12);
  c.heads = 0;
  c.name = "zero heads";
  EXPECT_TRUE(check_rope_case(c, backend()));
}

MLAROPE_INSTANTIATE_BACKENDS(MetadataBackendTest);

}  // namespace
}  // namespace mlarope::test
