// StateDirLock: one writing tally process per state directory.
//
// tally up, tally aggregate (with an applier) and tally replay write the
// state; they take this lock before anything else (before the router routes
// or the embedded broker starts), so a second writer is refused with one
// line naming the first one's pid instead of RocksDB's "While lock file"
// after it has begun work. tally serve, a read-only follower, shares the
// directory and takes no lock.
//
// The lock is flock(2) on the directory itself: nothing is written into the
// state directory, and the kernel releases it when its holder exits, however
// it exits (a SIGKILL leaves no stale lock behind).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"

namespace tally::store {

class StateDirLock {
 public:
  // Creates `dir` (and its parents) when missing and locks it for the life
  // of the returned object. FailedPrecondition "state directory DIR is in
  // use by another tally process (pid N)" when another process holds it (the
  // pid read from /proc/locks; "pid unknown" when it cannot be read). OK with
  // a null lock when `dir` cannot be created or opened as a directory:
  // nothing can be locked there, and opening the state says why. Safe for
  // concurrent use; the caller owns the result.
  static base::Result<std::unique_ptr<StateDirLock>> Acquire(const std::string& dir);

  // Releases the lock.
  ~StateDirLock();
  StateDirLock(const StateDirLock&) = delete;
  StateDirLock& operator=(const StateDirLock&) = delete;

 private:
  explicit StateDirLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace tally::store
