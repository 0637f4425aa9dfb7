// `troupe data import csv FILE --out DIR --label COL ...` (job/csv_import.hpp): the flags and the
// summary printed after an import.
#pragma once

#include <memory>
#include <string>

#include "command.hpp"

namespace troupe::cli {

// Declares `csv` under `import_cmd`; choosing it sets *mode to `id`. The runner imports (exit 0),
// refuses the input or the flags (2: no header, unknown columns, bad values, malformed lines) or
// fails to read the file or write the stores (1).
runner add_import_csv(CLI::App& import_cmd, std::shared_ptr<int> mode, int id);

// --delimiter's text: one character that is not a quote or a line break, or "tab"; false otherwise.
bool parse_delimiter(const std::string& text, char& out);

}  // namespace troupe::cli
