#include "fault_file_system.h"

#include <unistd.h>

namespace tally::store {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

namespace {

// A writable file whose writes fail while the file system's fault is active.
class FaultWritableFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultWritableFile(std::unique_ptr<rocksdb::FSWritableFile>&& f, const FaultFileSystem* fs, std::string name)
      : FSWritableFileOwnerWrapper(std::move(f)), fs_(fs), name_(std::move(name)) {}

  IOStatus Append(const Slice& data, const IOOptions& o, IODebugContext* dbg) override {
    if (fs_->Active()) return fs_->Fault("append to " + name_);
    return target()->Append(data, o, dbg);
  }
  IOStatus Append(const Slice& data, const IOOptions& o, const rocksdb::DataVerificationInfo& v,
                  IODebugContext* dbg) override {
    if (fs_->Active()) return fs_->Fault("append to " + name_);
    return target()->Append(data, o, v, dbg);
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& o,
                            IODebugContext* dbg) override {
    if (fs_->Active()) return fs_->Fault("append to " + name_);
    return target()->PositionedAppend(data, offset, o, dbg);
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& o,
                            const rocksdb::DataVerificationInfo& v, IODebugContext* dbg) override {
    if (fs_->Active()) return fs_->Fault("append to " + name_);
    return target()->PositionedAppend(data, offset, o, v, dbg);
  }
  IOStatus Flush(const IOOptions& o, IODebugContext* dbg) override {
    if (fs_->Active()) return fs_->Fault("flush of " + name_);
    return target()->Flush(o, dbg);
  }
  IOStatus Sync(const IOOptions& o, IODebugContext* dbg) override {
    if (fs_->Active()) return fs_->Fault("sync of " + name_);
    return target()->Sync(o, dbg);
  }
  IOStatus Fsync(const IOOptions& o, IODebugContext* dbg) override {
    if (fs_->Active()) return fs_->Fault("sync of " + name_);
    return target()->Fsync(o, dbg);
  }
  IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const IOOptions& o, IODebugContext* dbg) override {
    if (fs_->Active()) return fs_->Fault("sync of " + name_);
    return target()->RangeSync(offset, nbytes, o, dbg);
  }

 private:
  const FaultFileSystem* fs_;
  std::string name_;
};

}  // namespace

FaultFileSystem::FaultFileSystem(const std::shared_ptr<rocksdb::FileSystem>& base, std::string control_file)
    : FileSystemWrapper(base), control_file_(std::move(control_file)) {}

bool FaultFileSystem::Active() const { return ::access(control_file_.c_str(), F_OK) == 0; }

IOStatus FaultFileSystem::Fault(const std::string& what) const {
  return IOStatus::IOError("injected write fault (" + control_file_ + " exists)", what);
}

IOStatus FaultFileSystem::NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                          std::unique_ptr<rocksdb::FSWritableFile>* r, IODebugContext* dbg) {
  if (Active()) return Fault("creating " + f);
  std::unique_ptr<rocksdb::FSWritableFile> file;
  IOStatus s = target()->NewWritableFile(f, o, &file, dbg);
  if (s.ok()) r->reset(new FaultWritableFile(std::move(file), this, f));
  return s;
}

IOStatus FaultFileSystem::ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                             std::unique_ptr<rocksdb::FSWritableFile>* r, IODebugContext* dbg) {
  if (Active()) return Fault("reopening " + f);
  std::unique_ptr<rocksdb::FSWritableFile> file;
  IOStatus s = target()->ReopenWritableFile(f, o, &file, dbg);
  if (s.ok()) r->reset(new FaultWritableFile(std::move(file), this, f));
  return s;
}

IOStatus FaultFileSystem::ReuseWritableFile(const std::string& f, const std::string& old,
                                            const rocksdb::FileOptions& o,
                                            std::unique_ptr<rocksdb::FSWritableFile>* r, IODebugContext* dbg) {
  if (Active()) return Fault("reusing " + old);
  std::unique_ptr<rocksdb::FSWritableFile> file;
  IOStatus s = target()->ReuseWritableFile(f, old, o, &file, dbg);
  if (s.ok()) r->reset(new FaultWritableFile(std::move(file), this, f));
  return s;
}

}  // namespace tally::store
