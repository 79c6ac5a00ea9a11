// Converting a state of format 1 (format1.h).
#include "format1.h"

#include <fmt/core.h>
#include <rocksdb/iterator.h>
#include <rocksdb/write_batch.h>

#include <memory>
#include <string>
#include <vector>

#include "base/log.h"
#include "keys.h"
#include "state_store_impl.h"

namespace tally::store {

using base::Status;

Status ConvertFormat1Posts(rocksdb::DB* db, uint32_t partitions, uint32_t i,
                           const rocksdb::WriteOptions& wo) {
  const char begin[1] = {static_cast<char>(RecordKind::kPostCounters)};
  const char end[1] = {static_cast<char>(RecordKind::kPostCounters) + 1};
  const rocksdb::Slice end_key(end, 1);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &end_key;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  it->Seek(rocksdb::Slice(begin, 1));
  if (!it->Valid()) return FromRocks(it->status(), fmt::format("partition {}: converting", i));
  const int bits = PostPageBits(partitions);
  rocksdb::WriteBatch wb;
  std::vector<PagedPost> page;
  std::string key, value, first(begin, 1);
  uint64_t records = 0, pages = 0;
  auto put_page = [&](uint64_t id) {
    if (page.empty()) return;
    EncodePostPageKey(id, bits, &key);
    EncodePostPage(page, &value);
    wb.Put(key, value);
    page.clear();
    pages++;
  };
  // Pages put so far, and the records before `upto` deleted.
  auto write = [&](const rocksdb::Slice& upto) {
    wb.DeleteRange(first, upto);
    rocksdb::Status s = db->Write(wo, &wb);
    wb.Clear();
    first = upto.ToString();
    return FromRocks(s, fmt::format("partition {}: converting post counters", i));
  };
  uint64_t last = 0;
  for (; it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() != 9)
      return Status::Corruption(fmt::format("partition {}: malformed post key", i));
    const uint64_t id = DecodeBigEndian64(k.data() + 1);
    if (!page.empty() && (id >> bits) != (last >> bits)) {
      put_page(last);
      if (wb.Count() >= 10000) TALLY_RETURN_IF_ERROR(write(k));
    }
    PagedPost& p = page.emplace_back();
    p.slot = PostSlot(id, bits);
    if (!DecodeCounters(std::string_view(it->value().data(), it->value().size()), p.v,
                        schemas::kPostFieldCount)) {
      return Status::Corruption(
          fmt::format("partition {}: the post counters of {} do not decode", i, id));
    }
    last = id;
    records++;
  }
  if (!it->status().ok())
    return FromRocks(it->status(), fmt::format("partition {}: converting", i));
  put_page(last);
  TALLY_RETURN_IF_ERROR(write(end_key));
  TALLY_LOG_INFO("store", "partition {}: {} post counter records of format 1 now in {} pages", i,
                 records, pages);
  return Status::Ok();
}

}  // namespace tally::store
