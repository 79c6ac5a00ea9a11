// States of format 1 (internal to store/): a writer converts what a
// partition still holds of that format when it opens the partition
// (StateStore::Rep::Publish). Once no state of format 1 is left to read,
// this file goes.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <cstdint>

#include "base/status.h"

namespace tally::store {

// Format 1 kept each post's counters in a record of its own ('p'); format
// 2 keeps them in pages ('P', keys.h). A writer converts what a partition
// still holds of the first the first time it opens it, some 10,000 pages
// a batch: each batch puts whole pages and deletes the records they came
// from, so a crash between two leaves the rest to the next open.
base::Status ConvertFormat1Posts(rocksdb::DB* db, uint32_t partitions, uint32_t i,
                                 const rocksdb::WriteOptions& wo);

}  // namespace tally::store
