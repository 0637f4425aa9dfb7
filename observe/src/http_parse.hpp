// The request target's query, for the HTTP server (http_server.cpp); percent_decode and origin_form are
// public (troupe/observe/http_server.hpp).
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace troupe::observe {

// "a=1&b=%2F" -> {a: 1, b: /}; a key without '=' maps to "".
std::map<std::string, std::string> parse_query(const std::string& q);

// Why a request's Transfer-Encoding cannot be read ("" for chunked alone): the parser undoes
// chunked only ("gzip, chunked" was read as plain chunked, its body still compressed: 501).
std::string transfer_coding_problem(std::string_view te);

}  // namespace troupe::observe
