// The request target's query, for the HTTP server (http_server.cpp); percent_decode is public
// (troupe/observe/http_server.hpp).
#pragma once

#include <map>
#include <string>

namespace troupe::observe {

// "a=1&b=%2F" -> {a: 1, b: /}; a key without '=' maps to "".
std::map<std::string, std::string> parse_query(const std::string& q);

}  // namespace troupe::observe
