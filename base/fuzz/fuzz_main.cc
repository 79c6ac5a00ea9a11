// Replays fuzz inputs without libFuzzer: `<target> FILE_OR_DIR...` runs
// LLVMFuzzerTestOneInput on every file, so the checked-in corpus (and every
// crash ever found, saved into it) runs in the ordinary test suite. Built
// with clang and TALLY_FUZZ=ON, the same target links libFuzzer instead.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {
int RunFile(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  int n = 0;
  for (int i = 1; i < argc; i++) {
    std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      std::vector<std::filesystem::path> files;
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
      std::sort(files.begin(), files.end());
      for (const auto& f : files) n += RunFile(f);
    } else {
      n += RunFile(p);
    }
  }
  std::printf("%d inputs ran without a crash\n", n);
  return n > 0 ? 0 : 1;
}
