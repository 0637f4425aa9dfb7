#include "suggest.hpp"

#include <algorithm>
#include <numeric>

namespace troupe::cli {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: Levenshtein plus the transposition of two neighbours.
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i)
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::optional<std::string> nearest(std::string_view word, const std::vector<std::string>& candidates) {
  const std::size_t limit = std::clamp<std::size_t>(word.size() / 3, 1, 3);
  std::optional<std::string> best;
  std::size_t best_d = limit + 1;
  for (const auto& c : candidates)
    if (auto dist = edit_distance(word, c); dist < best_d) {
      best_d = dist;
      best = c;
    }
  return best;
}

namespace {

// The flags a word may be at `app`: its own and (fallthrough) its parents'.
std::vector<const CLI::Option*> flags_at(const CLI::App* app) {
  std::vector<const CLI::Option*> all;
  for (; app; app = app->get_parent())
    for (const auto* o : app->get_options([](const CLI::Option* o) { return !o->get_positional(); }))
      all.push_back(o);
  return all;
}

const CLI::Option* flag_named(const std::vector<const CLI::Option*>& flags, std::string_view word) {
  for (const auto* o : flags) {
    for (const auto& l : o->get_lnames())
      if (word == "--" + l) return o;
    for (const auto& s : o->get_snames())
      if (word == "-" + s) return o;
  }
  return nullptr;
}

}  // namespace

std::string suggestion(CLI::App& app, int argc, const char* const* argv) {
  CLI::App* at = &app;
  for (int i = 1; i < argc; ++i) {
    std::string_view word = argv[i];
    if (word == "--") break;
    if (word.size() > 1 && word[0] == '-') {
      const std::string_view name = word.substr(0, word.find('='));
      auto flags = flags_at(at);
      if (const auto* o = flag_named(flags, name)) {
        if (o->get_items_expected_max() > 0 && name.size() == word.size()) ++i;  // its value
        continue;
      }
      if (name.size() < 3 || name[1] != '-') return {};
      std::vector<std::string> names;
      for (const auto* o : flags)
        for (const auto& l : o->get_lnames()) names.push_back("--" + l);
      auto near = nearest(name, names);
      if (!near) return {};
      return "unknown flag '" + std::string(name) + "' (did you mean '" + *near + "'?)";
    }
    auto subs = at->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) continue;  // a positional argument
    auto it =
        std::find_if(subs.begin(), subs.end(), [&](CLI::App* s) { return s->check_name(std::string(word)); });
    if (it != subs.end()) {
      at = *it;
      continue;
    }
    std::vector<std::string> names;
    for (auto* s : subs) names.push_back(s->get_name());
    auto near = nearest(word, names);
    if (!near) return {};
    return "unknown subcommand '" + std::string(word) + "' (did you mean '" + *near + "'?)";
  }
  return {};
}

}  // namespace troupe::cli
