// The files of the status page (GET /, /status/...), embedded in the binary
// at build time by cmake/EmbedFiles.cmake: the page's own HTML, JavaScript
// and CSS (query/status/) and Debian's dygraphs chart library
// (libjs-dygraphs). Nothing is read from disk or fetched from a network at
// run time. Internal to query/.
//
// Thread model: the table is constant.
#pragma once

#include <span>
#include <string_view>

namespace tally::query::internal {

struct EmbeddedFile {
  std::string_view name;          // "index.html", "dygraph.min.js", ...
  std::string_view content_type;  // from the extension
  std::string_view etag;          // quoted: "\"0123456789abcdef\"", from the content's SHA-256
  std::string_view data;
};

// Every embedded file (generated: status_files.cc in the build tree).
std::span<const EmbeddedFile> EmbeddedFiles();

// The file called `name`, or null.
inline const EmbeddedFile* FindEmbeddedFile(std::string_view name) {
  for (const EmbeddedFile& f : EmbeddedFiles()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace tally::query::internal
