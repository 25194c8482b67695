// libFuzzer target for the HTTP request parser: whatever bytes a client sends, parsing
// neither crashes nor accepts a path that is not a clean absolute path. Built with
// Debian's clang by tools/fuzz_http_message.sh (`-fsanitize=fuzzer,address,undefined`);
// Bazel compiles it too (as a library: gcc has no libFuzzer), so it never rots.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "coordinator/http_message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view received(reinterpret_cast<const char*>(data), size);
  // What the server does: find the end of the head, parse what precedes it.
  const size_t end = mtrain::FindHttpRequestHeadEnd(received);
  const absl::string_view head =
      end == absl::string_view::npos ? received : received.substr(0, end);
  const absl::StatusOr<mtrain::HttpRequest> request = mtrain::ParseHttpRequestHead(head);
  if (!request.ok()) {
    // Refusals quote at most a few dozen bytes of input.
    if (request.status().message().size() > 512) std::abort();
    return 0;
  }
  const std::string& path = request->path;
  if (path.empty() || path[0] != '/' || absl::StrContains(path, "/../") ||
      absl::EndsWith(path, "/..") || absl::StrContains(path, "/./")) {
    std::abort();
  }
  for (const char c : path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) std::abort();
  }
  (void)mtrain::FormatHttpResponse({200, "text/plain", path, {}}, true);
  return 0;
}
