#include "rate_limiter.h"

#include <algorithm>
#include <cmath>

namespace tally::query::internal {

ClientKey ClientKey::FromIpv4(uint32_t host_order_address) {
  return ClientKey{0, (uint64_t{0xffff} << 32) | host_order_address};
}

ClientKey ClientKey::FromIpv6(const std::array<uint8_t, 16>& bytes) {
  bool mapped = true;
  for (int i = 0; i < 10; i++) mapped = mapped && bytes[i] == 0;
  mapped = mapped && bytes[10] == 0xff && bytes[11] == 0xff;
  if (mapped) {
    return FromIpv4((uint32_t{bytes[12]} << 24) | (uint32_t{bytes[13]} << 16) |
                    (uint32_t{bytes[14]} << 8) | uint32_t{bytes[15]});
  }
  uint64_t hi = 0;
  for (int i = 0; i < 8; i++) hi = (hi << 8) | bytes[i];
  // lo = 1 keeps every IPv6 key apart from the IPv4 ones (hi = 0, lo >= 2^47).
  return ClientKey{hi, 1};
}

size_t RateLimiter::KeyHash::operator()(const ClientKey& k) const noexcept {
  uint64_t x = k.hi * 0x9e3779b97f4a7c15ULL ^ k.lo;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return static_cast<size_t>(x);
}

RateLimiter::RateLimiter(double rate_per_s, double burst)
    : rate_per_ns_(rate_per_s / 1e9), burst_(burst) {}

void RateLimiter::Prune(Shard& shard, int64_t now_ns) {
  // A bucket that has refilled to `burst` behaves exactly like no bucket.
  for (auto it = shard.buckets.begin(); it != shard.buckets.end();) {
    const double tokens = it->second.tokens + (now_ns - it->second.last_ns) * rate_per_ns_;
    it = tokens >= burst_ ? shard.buckets.erase(it) : std::next(it);
  }
  if (shard.buckets.size() >= kMaxClientsPerShard) shard.buckets.clear();
}

int64_t RateLimiter::Acquire(const ClientKey& client, int64_t now_ns) {
  Shard& shard = shards_[KeyHash{}(client) % kShards];
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.buckets.find(client);
  if (it == shard.buckets.end()) {
    if (shard.buckets.size() >= kMaxClientsPerShard) Prune(shard, now_ns);
    it = shard.buckets.emplace(client, Bucket{burst_, now_ns}).first;
  }
  Bucket& b = it->second;
  if (now_ns > b.last_ns) {
    b.tokens = std::min(burst_, b.tokens + (now_ns - b.last_ns) * rate_per_ns_);
    b.last_ns = now_ns;
  }
  if (b.tokens >= 1.0) {
    b.tokens -= 1.0;
    return 0;
  }
  const double wait_ns = (1.0 - b.tokens) / rate_per_ns_;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(wait_ns / 1e6)));
}

size_t RateLimiter::ClientCount() {
  size_t n = 0;
  for (Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mu);
    n += s.buckets.size();
  }
  return n;
}

}  // namespace tally::query::internal
