// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "mlarope/error.h"
#include "mlarope/op_schema.h"

namespace mlarope {
namespace {

TEST(OpSchema, EveryOpHasItsOwnRowInEnumOrder) {
  const std::vector<Op> ops = all_ops();
  ASSERT_EQ(ops.size(), op_schemas().size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(static_cast<std::size_t>(ops[i]), i);
    EXPECT_EQ(schema_of(ops[i]).op, ops[i]);
  }
}

TEST(OpSchema, NamesParseBackToTheirOp) {
  for (const OpSchema& s : op_schemas()) {
    EXPECT_EQ(parse_op(s.name), s.op);
    EXPECT_EQ(to_string(s.op), s.name);
  }
  try {
    parse_op("rope_forward");
    FAIL() << "an unknown op parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_split_backward"), std::string::npos) << e.what();
  }
}

TEST(OpSchema, PairsPointAtEachOther) {
  for (const OpSchema& s : op_schemas()) {
    EXPECT_EQ(schema_of(s.forward).backward, s.backward) << s.name;
    EXPECT_EQ(schema_of(s.backward).forward, s.forward) << s.name;
    EXPECT_NE(s.forward, s.backward) << s.name;
    EXPECT_EQ(s.is_backward(), s.op == s.backward) << s.name;
    // A pair has the same in-place form both ways (the adjoint check runs either direction).
    EXPECT_EQ(schema_of(s.forward).has_in_place, schema_of(s.backward).has_in_place) << s.name;
  }
}

TEST(OpSchema, TensorNamesAreDistinctAndTheActivationComesFirst) {
  std::set<std::string> outputs;
  for (const OpSchema& s : op_schemas()) {
    ASSERT_FALSE(s.input_names().empty()) << s.name;
    EXPECT_EQ(s.input_names().front(), s.activation()) << s.name;
    for (const std::string& n : s.output_names()) EXPECT_TRUE(outputs.insert(n).second) << n;
  }
  const std::vector<std::string> inputs = all_input_names();
  EXPECT_EQ(std::set<std::string>(inputs.begin(), inputs.end()).size(), inputs.size());
  for (const std::string& n : inputs) EXPECT_EQ(outputs.count(n), 0u) << n;
}

}  // namespace
}  // namespace mlarope
