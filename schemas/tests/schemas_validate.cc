// schemas_validate: the C++ side of the schema conformance test.
//
// Reads a corpus file written by make_corpus.py: records of a 4-byte
// little-endian length followed by that many bytes (any bytes: invalid UTF-8
// and NUL included). Prints one line per record, in order:
//   ok                 EventParser accepted it (and EventToJson round-trips)
//   invalid<TAB>reason EventParser rejected it
//   error<TAB>what     the round trip failed: a bug
// Exits 0 once every record is printed, 2 on a usage error or a corrupt file.
//
// Usage: schemas_validate CORPUS_FILE   ("-" reads stdin)
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <string_view>

#include "schemas/event.h"

namespace {

int Run(std::istream& in) {
  const std::string corpus((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  tally::schemas::EventParser parser;
  tally::schemas::Event event;
  tally::schemas::Event again;
  std::string json;
  std::string out;
  size_t pos = 0;
  while (pos < corpus.size()) {
    if (corpus.size() - pos < 4) {
      std::cerr << "schemas_validate: truncated length at byte " << pos << "\n";
      return 2;
    }
    uint32_t len = 0;
    for (int i = 3; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(corpus[pos + i]);
    pos += 4;
    if (corpus.size() - pos < len) {
      std::cerr << "schemas_validate: truncated record at byte " << pos << "\n";
      return 2;
    }
    const std::string_view record(corpus.data() + pos, len);
    pos += len;

    const tally::base::Status st = parser.Parse(record, &event);
    if (!st.ok()) {
      out.append("invalid\t").append(st.message()).push_back('\n');
      continue;
    }
    json.clear();
    tally::schemas::AppendEventJson(event, &json);
    const tally::base::Status st2 = parser.Parse(json, &again);
    if (!st2.ok()) {
      out.append("error\tEventToJson output rejected: ").append(st2.message()).push_back('\n');
    } else if (!(again == event)) {
      out.append("error\tEventToJson round trip changed the event: ").append(json).push_back('\n');
    } else {
      out.append("ok\n");
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: schemas_validate CORPUS_FILE|-\n";
    return 2;
  }
  const std::string_view path = argv[1];
  if (path == "-") return Run(std::cin);
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::cerr << "schemas_validate: cannot open " << path << "\n";
    return 2;
  }
  return Run(in);
}
