// The TOML pieces of a store's manifest (manifest.cpp): strings and numbers written so that they
// read back exactly, and the `[columns]` table of a store imported from CSV.
#pragma once

#include <ostream>
#include <string>

#include "troupe/core/config.hpp"
#include "troupe/storage/row_format.hpp"

namespace troupe::storage {

// A TOML basic string: quotes, backslashes and control characters escaped.
std::string toml_string(const std::string& s);

// The shortest text that reads back as exactly `v`, always a TOML float (it has an exponent).
std::string toml_float(double v);

// Writes `[columns]` (buckets_per_field is left to the schema's table).
void write_columns(std::ostream& o, const row_format& f);

// Reads `[columns]`; problems are recorded in `s`'s reader (the caller's finish() reports them).
row_format read_columns(config_section s, std::uint64_t buckets_per_field);

}  // namespace troupe::storage
