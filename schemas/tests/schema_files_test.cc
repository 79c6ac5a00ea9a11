// The JSON Schema files and the C++ constants describe the same limits. (The
// conformance test checks behaviour; this checks the numbers and names.)
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "schemas/event.h"

namespace tally::schemas {
namespace {

nlohmann::json Load(const std::string& name) {
  const std::string path = std::string(TALLY_SCHEMAS_DIR) + "/" + name + ".json";
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  if (!in) return nlohmann::json::object();
  return nlohmann::json::parse(in);
}

TEST(SchemaFilesTest, OneFilePerEventTypeNamedAfterIt) {
  for (int i = 0; i < kEventTypeCount; ++i) {
    const std::string name = EventTypeName(static_cast<EventType>(i));
    const nlohmann::json s = Load(name);
    EXPECT_EQ(s.value("$schema", ""), "https://json-schema.org/draft/2020-12/schema") << name;
    EXPECT_EQ(s.value("title", ""), name);
    EXPECT_EQ(s["properties"]["type"]["const"], name);
    EXPECT_TRUE(s.contains("$id") && s.contains("description")) << name;
    const nlohmann::json required = s["required"];
    EXPECT_EQ(required.at(0), "type") << name;
    EXPECT_EQ(required.at(1), "ts") << name;
    EXPECT_FALSE(s.contains("additionalProperties")) << name << ": unknown fields are allowed";
  }
}

TEST(SchemaFilesTest, LimitsMatchTheConstants) {
  const nlohmann::json defs = Load("defs")["$defs"];
  EXPECT_EQ(defs["ts"]["minimum"], 0);
  EXPECT_EQ(defs["ts"]["maximum"].get<int64_t>(), kMaxTs);
  EXPECT_EQ(defs["id"]["anyOf"][0]["minimum"], 1);
  EXPECT_EQ(defs["id"]["anyOf"][0]["maximum"].get<uint64_t>(), kMaxId);
  EXPECT_EQ(defs["count"]["maximum"].get<uint64_t>(), kMaxId);
  EXPECT_EQ(defs["event_id"]["pattern"],
            "^[ -~]{1," + std::to_string(kMaxEventIdLength) + "}$(?!\\n)");

  const nlohmann::json mention = Load("mention")["properties"]["target_ids"];
  EXPECT_EQ(mention["minItems"], 1);
  EXPECT_EQ(mention["maxItems"].get<size_t>(), kMaxMentionTargets);
  EXPECT_EQ(Load("notice")["properties"]["title"]["maxLength"].get<size_t>(), kMaxTitleCodePoints);
  const nlohmann::json read = Load("read")["properties"];
  EXPECT_EQ(read["snapshot"]["maxProperties"].get<size_t>(), kMaxSnapshotEntries);
  const nlohmann::json kinds = read["kind"]["enum"];
  ASSERT_EQ(kinds.size(), static_cast<size_t>(kUnreadKindCount));
  for (int i = 0; i < kUnreadKindCount; ++i) {
    EXPECT_EQ(kinds[i], UnreadKindName(static_cast<UnreadKind>(i)));
  }
}

}  // namespace
}  // namespace tally::schemas
