// `[serve] access_log = true`: a line per HTTP request in <state>/logs/access.log, as uvicorn's
// and nginx's access logs give one:
//   2026-12-01T10:50:01.123Z 127.0.0.1:53422 "POST /v2/models/mlp/infer" 200 312 0.412ms id=abc
// (the request's X-Request-ID, when it has one; a request the server could not read: "-").
// Thread-safe: the HTTP threads write through one mutex, each line flushed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include "troupe/core/error.hpp"
#include "troupe/observe/http_server.hpp"

namespace troupe::serve {

class access_log {
 public:
  // Opens `path` for appending. Errors (io_error) name it.
  static expected<std::unique_ptr<access_log>> open(const std::string& path);
  ~access_log();
  access_log(const access_log&) = delete;
  access_log& operator=(const access_log&) = delete;

  // One request's line; `wall_ms` the time it is written, in Unix milliseconds.
  void write(const observe::http_access& a, std::int64_t wall_ms);
  // The line, without its newline (for tests).
  static std::string line(const observe::http_access& a, std::int64_t wall_ms);

 private:
  explicit access_log(std::FILE* f) : f_(f) {}
  std::mutex mu_;
  std::FILE* f_;
};

}  // namespace troupe::serve
