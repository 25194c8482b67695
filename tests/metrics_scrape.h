// Talking to a Prometheus endpoint from tests: an HTTP GET over a plain socket (no curl
// dependency) and Debian's `promtool check metrics` over the scraped text.
#ifndef MTRAIN_TESTS_METRICS_SCRAPE_H_
#define MTRAIN_TESTS_METRICS_SCRAPE_H_

#include <string>

#include "absl/status/statusor.h"

namespace mtrain {

inline constexpr char kPromtool[] = "/usr/bin/promtool";

struct HttpResponse {
  int status = 0;
  std::string body;
};

// GET http://127.0.0.1:PORT/PATH with HTTP/1.0.
absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& path);

// Runs `promtool check metrics` with `text` on its standard input; returns the exit code
// and fills *output with what it printed (lint problems go to stderr).
int RunPromtool(const std::string& text, std::string* output);

}  // namespace mtrain

#endif  // MTRAIN_TESTS_METRICS_SCRAPE_H_
