// `troupe data import csv FILE --out DIR --label COL ...` (job/csv_import.hpp): the flags and the
// summary printed after an import.
#pragma once

#include <memory>

#include "command.hpp"

namespace troupe::cli {

// Declares `csv` under `import_cmd`; choosing it sets *mode to `id`. The runner imports (exit 0),
// refuses the input or the flags (2: no header, unknown columns, bad values, malformed lines) or
// fails to read the file or write the stores (1).
runner add_import_csv(CLI::App& import_cmd, std::shared_ptr<int> mode, int id);

}  // namespace troupe::cli
