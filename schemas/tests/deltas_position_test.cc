#include "schemas/deltas_position.h"

#include <gtest/gtest.h>

#include "schemas/delta.h"

namespace tally::schemas {
namespace {

TEST(DeltasPositionTest, RoundTrips) {
  std::vector<DeltasPosition> in = {{0, 17, 4, -1}, {3, 99, 12, 80}, {5, 2, 0, 1}};
  std::string text;
  EncodeDeltasPositions(in, &text);
  EXPECT_EQ(text, "d1;0,17,4,-1;3,99,12,80;5,2,0,1");
  auto out = DecodeDeltasPositions(text);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, in);
}

TEST(DeltasPositionTest, StopsAtTheByteLimit) {
  std::vector<DeltasPosition> in = {{0, -1, 0, -1}, {1, 10, 1, 5}, {2, 20, 2, 15}};
  std::string text;
  EncodeDeltasPositions(in, &text, 24);
  EXPECT_EQ(text, "d1;0,-1,0,-1;1,10,1,5");
  auto out = DecodeDeltasPositions(text);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, (std::vector<DeltasPosition>{{0, -1, 0, -1}, {1, 10, 1, 5}}));
}

TEST(DeltasPositionTest, EmptyMetadataHasNoEntriesAndGarbageIsCorruption) {
  auto none = DecodeDeltasPositions("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto only_version = DecodeDeltasPositions("d1");
  ASSERT_TRUE(only_version.ok());
  EXPECT_TRUE(only_version->empty());
  for (const char* bad :
       {"x", "d2;1,2,3,4", "d1;", "d1;1,2,3", "d1;1,2,3,4;", "d1;-1,2,3,0", "d1;1,2,3,3",
        "d1;1,-2,3,-2", "d1;1,2,-1,1", "d1;1,2,3,4x", "d1;1,,3,0"}) {
    EXPECT_EQ(DecodeDeltasPositions(bad).status().code(), base::StatusCode::kCorruption) << bad;
  }
}

TEST(DeltaBatchBuilderTest, KeepsTheFirstOffsetOfEachStreamUntilFinish) {
  DeltaBatchBuilder b;
  Delta d;
  d.source.stream = b.StreamIndex("tally.events", 3);
  d.source.offset = 40;
  b.Add(d);
  d.source.offset = 41;
  b.Add(d);
  d.source.stream = b.StreamIndex("tally.events", 1);
  d.source.offset = 7;
  b.Add(d);
  d.source.stream = b.StreamIndex("tally.events", 3);
  d.source.offset = 42;
  b.Add(d);
  ASSERT_EQ(b.streams().size(), 2u);
  EXPECT_EQ(b.streams()[0], (SourceStream{"tally.events", 3}));
  EXPECT_EQ(b.first_offsets(), (std::vector<int64_t>{40, 7}));
  (void)b.Finish();
  EXPECT_TRUE(b.streams().empty());
  EXPECT_TRUE(b.first_offsets().empty());
}

}  // namespace
}  // namespace tally::schemas
