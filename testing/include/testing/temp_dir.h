// TempDir: a fresh directory for the files of one test (stores, logs,
// inputs), removed with everything in it when the object dies. Part of
// tally_testing, the support library of tally's tests and tools; nothing in
// the tally binary links it.
//
// Thread model: externally synchronized; path() may be read from any thread
// while the object lives.
#pragma once

#include <filesystem>
#include <string_view>

namespace tally::testing {

class TempDir {
 public:
  // Creates <system temp dir>/tally-<prefix>-XXXXXX with mkdtemp, so it is
  // new and unique even when ctest runs the tests of one binary as parallel
  // processes. If it cannot be created no test can run: the process prints
  // why on stderr and aborts.
  explicit TempDir(std::string_view prefix = "test");
  // Removes the directory recursively (errors ignored) unless Keep() was
  // called.
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The directory's absolute path; valid while the object lives.
  const std::filesystem::path& path() const { return path_; }

  // Leaves the directory in place at destruction, e.g. for the logs of a
  // failed test.
  void Keep() { keep_ = true; }

 private:
  std::filesystem::path path_;
  bool keep_ = false;
};

}  // namespace tally::testing
