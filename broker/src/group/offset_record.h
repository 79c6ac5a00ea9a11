// One committed offset as the offsets file keeps it, and its framing.
//
// The file `<log-dir>/__consumer_offsets/offsets.log` is an 8-byte magic
// ("TLYOFS01") followed by records, each:
//   u32 length   bytes after this field (CRC and body)
//   u32 crc32c   CRC32C (Castagnoli) of the body
//   body:  u8 type (0 commit, 1 delete), u16 + group, u16 + topic,
//          i32 partition, i64 offset, i32 leader epoch, u32 + metadata,
//          i64 commit timestamp (ms since the Unix epoch)
// Integers are little-endian; strings are a length then raw bytes. The
// latest record for a (group, topic, partition) wins; a delete removes it.
// Thread model: pure functions and value types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tally::broker {

struct OffsetRecord {
  std::string group;
  std::string topic;
  int32_t partition = 0;
  int64_t offset = -1;
  int32_t leader_epoch = -1;
  std::string metadata;
  int64_t commit_timestamp_ms = 0;
  bool deleted = false;  // a delete (expired offsets): the other values are unused
};

namespace internal {

inline constexpr std::string_view kOffsetFileMagic = "TLYOFS01";
// The largest record a reader accepts; anything longer is damage. Group ids
// and topics are at most 32767 bytes on the wire and metadata is limited by
// the coordinator far below this.
inline constexpr uint32_t kMaxOffsetRecordLength = 1u << 20;

// Appends `record`, framed, to *out. Group and topic must be shorter than
// 64 KiB (asserted).
void EncodeOffsetRecord(const OffsetRecord& record, std::string* out);

enum class OffsetRecordDecode {
  kOk,         // *record is set and *size is the framed size
  kTruncated,  // the data ends inside the record
  kBad,        // a wrong length, CRC or body; *why says which
};

// Decodes the record at the start of data[0, n).
OffsetRecordDecode DecodeOffsetRecord(const char* data, size_t n, OffsetRecord* record,
                                      size_t* size, std::string* why);

}  // namespace internal
}  // namespace tally::broker
