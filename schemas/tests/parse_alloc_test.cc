// EventParser::Parse and AppendEventJson allocate nothing in steady state.
// This file replaces the global operator new of schemas_test to count the
// allocations made by the current thread while counting is on.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "schemas/event.h"

namespace {
thread_local bool g_counting = false;
thread_local long g_allocations = 0;

void* Allocate(std::size_t n) {
  if (g_counting) ++g_allocations;
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return Allocate(n); }
void* operator new[](std::size_t n) { return Allocate(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  if (g_counting) ++g_allocations;
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace tally::schemas {
namespace {

const std::vector<std::string>& Inputs() {
  static const std::vector<std::string> kInputs = {
      R"({"type":"post","ts":1,"id":"trace-123","author_id":1,"post_id":"2"})",
      R"({"type":"like","ts":1,"post_id":2,"user_id":3,"author_id":1,"extra":{"a":[1,2,{"b":null}]}})",
      R"({"type":"mention","ts":1,"user_id":3,"target_ids":[4,5,6,7,8,9,10,11,12,13,14,15,16]})",
      R"({"type":"notice","ts":1,"notice_id":9,"title":"a fairly long title \u00e9\u4e2d to copy"})",
      R"({"type":"red_dot","ts":1,"channel":"home.feed"})",
      R"({"type":"read","ts":1,"user_id":3,"kind":"feed","snapshot":{"8":3,"10":0,"11":7,"12":1}})",
      R"({"type":"read","ts":1,"user_id":3,"kind":"red_dot","channel":"home"})",
      R"({"type":"view","ts":1,"post_id":2})",
      R"({"type":"dm","ts":1,"from_user_id":6,"to_user_id":7,"k1":1,"k2":2,"k3":3,"k4":4})",
  };
  return kInputs;
}

TEST(ParseAllocTest, SteadyStateParseAllocatesNothing) {
  EventParser parser;
  Event event;
  std::string json;
  json.reserve(4096);
  // Warm up: buffers and the event's capacity grow to fit every input.
  for (int round = 0; round < 2; ++round) {
    for (const std::string& in : Inputs()) ASSERT_TRUE(parser.Parse(in, &event).ok()) << in;
  }
  g_allocations = 0;
  g_counting = true;
  bool all_ok = true;
  for (int round = 0; round < 100; ++round) {
    for (const std::string& in : Inputs()) {
      all_ok &= parser.Parse(in, &event).ok();
      json.clear();
      AppendEventJson(event, &json);
    }
  }
  g_counting = false;
  EXPECT_TRUE(all_ok);
  EXPECT_EQ(g_allocations, 0);
}

}  // namespace
}  // namespace tally::schemas
