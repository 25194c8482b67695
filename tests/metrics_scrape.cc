#include "tests/metrics_scrape.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mtrain {

// A minimal HTTP/1.0 GET over a plain socket: the test checks what a Prometheus server
// would really receive, without depending on curl. HTTP/1.0 makes the server close the
// connection after the body, so reading to EOF reads exactly one response.
absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket() failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to 127.0.0.1:", port));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1:", port, "\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, 0);
    if (n <= 0) {
      close(fd);
      return absl::InternalError("send() failed");
    }
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buffer[4096];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) raw.append(buffer, n);
  close(fd);

  const size_t header_end = raw.find("\r\n\r\n");
  if (header_end == std::string::npos) return absl::InternalError("no end of headers");
  // "HTTP/1.x 200 OK"
  std::vector<std::string> status_line =
      absl::StrSplit(raw.substr(0, raw.find("\r\n")), absl::MaxSplits(' ', 2));
  HttpResponse response;
  if (status_line.size() < 2 || !absl::SimpleAtoi(status_line[1], &response.status)) {
    return absl::InternalError(absl::StrCat("bad status line in: ", raw.substr(0, 100)));
  }
  response.body = raw.substr(header_end + 4);
  return response;
}

// Runs `promtool check metrics` with `text` on its standard input; returns the exit code
// and fills *output with what it printed (lint problems go to stderr).
int RunPromtool(const std::string& text, std::string* output) {
  const char* tmpdir = std::getenv("TEST_TMPDIR");
  const std::string input = absl::StrCat(tmpdir ? tmpdir : "/tmp", "/scrape.txt");
  std::ofstream(input) << text;
  const std::string command = absl::StrCat(kPromtool, " check metrics < ", input, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output->append(buffer, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace mtrain
