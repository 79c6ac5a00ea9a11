// Support for the group area's tests: a coordinator over a store in a
// temporary directory, a manual clock, and helpers that send one request
// and capture its (possibly held) answer.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "group/errors.h"
#include "group/group_coordinator.h"
#include "group/offset_store.h"
#include "testing/temp_dir.h"

namespace tally::broker {

template <typename T>
using Held = std::shared_ptr<std::optional<T>>;

class GroupTest : public ::testing::Test {
 protected:
  static constexpr int32_t kSession = 10000;
  static constexpr int32_t kRebalance = 30000;

  void SetUp() override {
    OpenStore();
    MakeCoordinator();
  }

  void OpenStore(OffsetStoreOptions store_options = {}) {
    coord_.reset();
    store_.reset();
    auto store = OffsetStore::Open(dir_.path(), store_options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
  }

  void MakeCoordinator() {
    options_.clock.steady_ms = [this] { return now_; };
    options_.clock.wall_ms = [this] { return wall_; };
    coord_ = std::make_unique<GroupCoordinator>(store_.get(), options_);
  }

  // Moves both clocks on and runs the timers.
  int64_t Advance(int64_t ms) {
    now_ += ms;
    wall_ += ms;
    return coord_->Tick();
  }

  static std::vector<GroupProtocol> Protocols(const std::string& meta,
                                              const std::string& name = "range") {
    return {{name, meta}};
  }

  GroupJoinRequest JoinReq(const std::string& member_id, std::vector<GroupProtocol> protocols,
                           const std::string& instance_id = "") {
    GroupJoinRequest r;
    r.group_id = group_;
    r.member_id = member_id;
    r.group_instance_id = instance_id;
    r.client_id = "client";
    r.client_host = "/127.0.0.1";
    r.protocol_type = "consumer";
    r.protocols = std::move(protocols);
    r.session_timeout_ms = kSession;
    r.rebalance_timeout_ms = kRebalance;
    return r;
  }

  Held<JoinGroupResult> Join(const GroupJoinRequest& r) {
    auto held = std::make_shared<std::optional<JoinGroupResult>>();
    coord_->JoinGroup(r, [held](JoinGroupResult res) {
      EXPECT_FALSE(held->has_value()) << "answered twice";
      *held = std::move(res);
    });
    return held;
  }

  Held<SyncGroupResult> Sync(const std::string& member_id, int32_t generation,
                             std::vector<SyncGroupAssignment> assignments = {},
                             const std::string& instance_id = "") {
    GroupSyncRequest r;
    r.group_id = group_;
    r.generation_id = generation;
    r.member_id = member_id;
    r.group_instance_id = instance_id;
    r.assignments = std::move(assignments);
    auto held = std::make_shared<std::optional<SyncGroupResult>>();
    coord_->SyncGroup(r, [held](SyncGroupResult res) {
      EXPECT_FALSE(held->has_value()) << "answered twice";
      *held = std::move(res);
    });
    return held;
  }

  int16_t Heartbeat(const std::string& member_id, int32_t generation,
                    const std::string& instance_id = "") {
    return coord_->Heartbeat({group_, generation, member_id, instance_id});
  }

  // A new member joins and the join completes at once (a group of one, or
  // the last member of a rebalance). Returns the answer.
  JoinGroupResult JoinAlone(const std::string& meta, const std::string& instance_id = "") {
    auto j = Join(JoinReq("", Protocols(meta), instance_id));
    EXPECT_TRUE(j->has_value());
    return j->value_or(JoinGroupResult{});
  }

  Held<OffsetCommitResult> Commit(const std::string& member_id, int32_t generation,
                                  std::vector<OffsetCommitPartition> partitions,
                                  const std::string& instance_id = "") {
    GroupOffsetCommitRequest r;
    r.group_id = group_;
    r.generation_id = generation;
    r.member_id = member_id;
    r.group_instance_id = instance_id;
    r.partitions = std::move(partitions);
    auto held = std::make_shared<std::optional<OffsetCommitResult>>();
    coord_->OffsetCommit(r, [held](OffsetCommitResult res) {
      EXPECT_FALSE(held->has_value()) << "answered twice";
      *held = std::move(res);
    });
    return held;
  }

  // What the flusher thread and the network thread do after a flush.
  void FlushAndRelease() {
    ASSERT_TRUE(store_->Flush().ok());
    coord_->ReleaseDurableCommits();
  }

  OffsetFetchPartition Fetch(const std::string& topic, int32_t partition) {
    GroupOffsetFetchRequest r;
    r.group_id = group_;
    r.partitions.push_back({topic, partition});
    OffsetFetchResult res = coord_->OffsetFetch(r);
    EXPECT_EQ(res.partitions.size(), 1u);
    return res.partitions.empty() ? OffsetFetchPartition{} : res.partitions[0];
  }

  std::string State() { return coord_->DescribeGroup(group_).state; }

  tally::testing::TempDir dir_{"group"};
  std::string group_ = "g";
  int64_t now_ = 1000000;
  int64_t wall_ = 1700000000000;
  GroupCoordinatorOptions options_;
  std::unique_ptr<OffsetStore> store_;
  std::unique_ptr<GroupCoordinator> coord_;
};

}  // namespace tally::broker
