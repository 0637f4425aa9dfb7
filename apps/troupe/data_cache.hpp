// `troupe data cache [list] [--root R | --cache DIR]` and `troupe data cache prune [--older-than AGE]
// [--dry-run]` (job/dataset_cache.hpp): the dataset cache's entries, their size, last use and
// whether a job uses them; prune removes those no job uses.
#pragma once

#include <memory>

#include "command.hpp"

namespace troupe::cli {

// Declares `cache` (and `cache prune`) under `data`; choosing either sets *mode to `id`.
runner add_data_cache(CLI::App& data_cmd, std::shared_ptr<int> mode, int id);

}  // namespace troupe::cli
