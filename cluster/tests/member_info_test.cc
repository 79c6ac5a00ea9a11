// MemberInfo's JSON form: what a member writes reads back the same, and a
// hostile record is refused with a reason, never a crash.
#include "cluster/member_info.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tally::cluster {
namespace {

MemberInfo Sample() {
  MemberInfo m;
  m.member = "m-1";
  m.http = "http://10.0.0.1:8080";
  m.owns = {0, 3, 7};
  m.standby = {2};
  m.restoring = {{5, 100, 2000}};
  m.generation = 12;
  m.ts_ms = 1764000000000;
  return m;
}

TEST(MemberInfoTest, WritesTheDocumentedShape) {
  EXPECT_EQ(ToJson(Sample()),
            R"({"member":"m-1","http":"http://10.0.0.1:8080","owns":[0,3,7],"standby":[2],)"
            R"("restoring":[{"partition":5,"offset":100,"end_offset":2000}],"generation":12,)"
            R"("ts_ms":1764000000000})");
}

TEST(MemberInfoTest, ReadsBackWhatItWrites) {
  auto back = MemberInfoFromJson(ToJson(Sample()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, Sample());
}

TEST(MemberInfoTest, WritesAndReadsThePeerKeyOnlyWhenSet) {
  MemberInfo m = Sample();
  m.peer_key = "0123456789abcdef0123456789abcdef";
  const std::string json = ToJson(m);
  EXPECT_NE(json.find(R"(,"peer_key":"0123456789abcdef0123456789abcdef"})"), std::string::npos)
      << json;
  auto back = MemberInfoFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, m);
  // A record without one (an older writer) reads as no key.
  auto old = MemberInfoFromJson(ToJson(Sample()));
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->peer_key, "");
  EXPECT_FALSE(MemberInfoFromJson(R"({"member":"a","http":"","owns":[],"standby":[],)"
                                  R"("restoring":[],"generation":1,"ts_ms":1,"peer_key":7})")
                   .ok());
}

TEST(MemberInfoTest, WritesAndReadsTheWritingProcessOnlyWhenSet) {
  MemberInfo m = Sample();
  m.peer_key = "k";
  m.process = "6f1c2f0e-0b7a-4c1e-9d55-0d6a1c0e8b11:4026531836:4242";
  const std::string json = ToJson(m);
  EXPECT_NE(json.find(R"(,"process":"6f1c2f0e-0b7a-4c1e-9d55-0d6a1c0e8b11:4026531836:4242"})"),
            std::string::npos)
      << json;
  auto back = MemberInfoFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, m);
  EXPECT_EQ(ToJson(Sample()).find("process"), std::string::npos);
  EXPECT_FALSE(MemberInfoFromJson(R"({"member":"a","http":"","owns":[],"standby":[],)"
                                  R"("restoring":[],"generation":1,"ts_ms":1,"process":[1]})")
                   .ok());
}

TEST(MemberInfoTest, SortsPartitionsAndIgnoresUnknownFields) {
  auto m = MemberInfoFromJson(
      R"({"member":"a","http":"","owns":[3,1,3],"standby":[],"restoring":[],"generation":0,)"
      R"("ts_ms":5,"zone":"eu-1"})");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->owns, (std::vector<int32_t>{1, 3}));
  EXPECT_TRUE(HasPartition(m->owns, 3));
  EXPECT_FALSE(HasPartition(m->owns, 2));
}

TEST(MemberInfoTest, RefusesHostileRecords) {
  const std::string ok_tail = R"("standby":[],"restoring":[],"generation":1,"ts_ms":1})";
  const std::vector<std::string> bads = {
      std::string(""),
      std::string("garbage"),
      std::string("[]"),
      std::string("null"),
      std::string(R"({"member":"a"})"),
      R"({"member":"","http":"","owns":[],)" + ok_tail,
      R"({"member":7,"http":"","owns":[],)" + ok_tail,
      R"({"member":"a","http":null,"owns":[],)" + ok_tail,
      R"({"member":"a","http":"","owns":[-1],)" + ok_tail,
      R"({"member":"a","http":"","owns":[2147483648],)" + ok_tail,
      R"({"member":"a","http":"","owns":[1.5],)" + ok_tail,
      R"({"member":"a","http":"","owns":["1"],)" + ok_tail,
      R"({"member":"a","http":"","owns":{},)" + ok_tail,
      R"({"member":"a","http":"","owns":[],"standby":[],"restoring":[{"partition":1}],"generation":1,"ts_ms":1})",
      R"({"member":"a","http":"","owns":[],"standby":[],"restoring":[7],"generation":1,"ts_ms":1})",
      R"({"member":"a","http":"","owns":[],"standby":[],"restoring":[],"generation":-1,"ts_ms":1})",
      R"({"member":"a","http":"","owns":[],"standby":[],"restoring":[],"generation":18446744073709551615,"ts_ms":1})",
      R"({"member":"a","http":"","owns":[],"standby":[],"restoring":[],"generation":1})",
      std::string(100000, '['),
      R"({"member":")" + std::string(300, 'x') + R"(","http":"","owns":[],)" + ok_tail,
  };
  for (const std::string& bad : bads) {
    auto m = MemberInfoFromJson(bad);
    EXPECT_FALSE(m.ok()) << bad.substr(0, 200);
  }
}

}  // namespace
}  // namespace tally::cluster
