#include "suggest.hpp"

#include <algorithm>
#include <numeric>

namespace troupe::cli {

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

// `word` is none of `subs`: the nearest, else (nothing near) the choices (CLI11 said only "A
// subcommand is required").
std::string unknown_subcommand(std::string_view word, const std::vector<CLI::App*>& subs) {
  std::vector<std::string> names;
  for (auto* s : subs) names.push_back(s->get_name());
  auto near = nearest(word, names);
  if (near) return "unknown subcommand '" + std::string(word) + "' (did you mean '" + *near + "'?)";
  std::string all;
  for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
  return "unknown subcommand '" + std::string(word) + "' (one of: " + all + ")";
}
}  // namespace

std::string suggestion(CLI::App& app, int argc, const char* const* argv, std::string* command) {
  CLI::App* at = &app;
  if (command) *command = "troupe";
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
      if (command) command->append(" ").append(at->get_name());
      continue;
    }
    return unknown_subcommand(word, subs);
  }
  return {};
}

}  // namespace troupe::cli
