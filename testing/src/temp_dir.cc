#include "testing/temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>

namespace tally::testing {

TempDir::TempDir(std::string_view prefix) {
  std::error_code ec;
  std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string templ = (base / ("tally-" + std::string(prefix) + "-XXXXXX")).string();
  if (::mkdtemp(templ.data()) == nullptr) {
    std::fprintf(stderr, "TempDir: mkdtemp %s: %s\n", templ.c_str(), std::strerror(errno));
    std::abort();
  }
  path_ = templ;
}

TempDir::~TempDir() {
  if (keep_) return;
  std::error_code ec;  // a test's leftovers are not worth failing it for
  std::filesystem::remove_all(path_, ec);
}

}  // namespace tally::testing
