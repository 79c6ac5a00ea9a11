// RateLimiter: per-client token buckets for the HTTP tier (--rate-limit).
//
// Each client (an IPv4 address, or an IPv6 /64 prefix, since one host
// usually owns a whole /64) has a bucket of `burst` tokens refilled at
// `rate_per_s`; a request takes one token or is refused with the time until
// the next token. The buckets live in kShards shards, each behind its own
// mutex, so concurrent requests from different clients rarely meet on a
// lock, and a shard holds at most kMaxClientsPerShard buckets: when full, it
// forgets the buckets that have refilled (a full bucket is the same as no
// bucket), and if that is not enough, all of them (a flood of distinct
// addresses then gets a fresh burst each, never an unbounded table).
//
// Internal to query/ (used by http_server.cc). Thread model: safe for
// concurrent use.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace tally::query::internal {

// A client's identity for rate limiting: an IPv4 address as its
// IPv4-mapped IPv6 form, or the first 64 bits of an IPv6 address.
struct ClientKey {
  uint64_t hi = 0;
  uint64_t lo = 0;
  friend bool operator==(const ClientKey&, const ClientKey&) = default;

  static ClientKey FromIpv4(uint32_t host_order_address);
  // `bytes` is the 16-byte address in network order. IPv4-mapped addresses
  // (::ffff:a.b.c.d) give the key of the IPv4 address.
  static ClientKey FromIpv6(const std::array<uint8_t, 16>& bytes);
};

class RateLimiter {
 public:
  static constexpr size_t kShards = 64;
  static constexpr size_t kMaxClientsPerShard = 4096;

  // Preconditions: rate_per_s > 0, burst >= 1.
  RateLimiter(double rate_per_s, double burst);

  // Takes one token from `client`'s bucket at time `now_ns` (a steady
  // clock). Returns 0 if the request may go on, else the milliseconds until
  // the bucket holds a token again (>= 1).
  int64_t Acquire(const ClientKey& client, int64_t now_ns);

  // Buckets currently held (for tests).
  size_t ClientCount();

 private:
  struct KeyHash {
    size_t operator()(const ClientKey& k) const noexcept;
  };
  struct Bucket {
    double tokens;
    int64_t last_ns;
  };
  struct alignas(64) Shard {
    std::mutex mu;
    std::unordered_map<ClientKey, Bucket, KeyHash> buckets;  // guarded by mu
  };
  void Prune(Shard& shard, int64_t now_ns);

  const double rate_per_ns_;
  const double burst_;
  std::array<Shard, kShards> shards_;
};

}  // namespace tally::query::internal
