// FaultFileSystem: a RocksDB FileSystem that fails every write while a
// control file exists, for fault drills and tests through real processes
// (as LevelDB's ErrorEnv and RocksDB's FaultInjectionTestFS, but switched
// from outside the process: `touch FILE` starts the fault, `rm FILE` ends it).
//
// While FILE exists, creating or reopening a writable file fails and so do
// Append, PositionedAppend, Flush, Sync, Fsync and RangeSync on files already
// open: every write RocksDB makes (WAL, SST, MANIFEST) gets an IOError, as on
// a full or failing disk. Reads are untouched. Armed only through
// StoreOptions::fault_file (tally: TALLY_STORE_FAULT_FILE).
//
// Thread model: safe for concurrent use (one access(2) per write call).
#pragma once

#include <rocksdb/file_system.h>

#include <memory>
#include <string>

namespace tally::store {

class FaultFileSystem : public rocksdb::FileSystemWrapper {
 public:
  FaultFileSystem(const std::shared_ptr<rocksdb::FileSystem>& base, std::string control_file);

  static const char* kClassName() { return "TallyFaultFileSystem"; }
  const char* Name() const override { return kClassName(); }

  // True while the control file exists.
  bool Active() const;
  // The error every write gets while Active().
  rocksdb::IOStatus Fault(const std::string& what) const;

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* dbg) override;

 private:
  std::string control_file_;
};

}  // namespace tally::store
