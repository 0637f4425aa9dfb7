// The parser fuzzes' edit: 1 to 4 random byte changes, cuts or insertions of JSON punctuation.
#pragma once

#include <random>
#include <string>

namespace troupe::serve {

inline void mutate(std::mt19937& rng, std::string& s, const std::string& inserts) {
  for (int e = 0, edits = 1 + static_cast<int>(rng() % 4); e < edits; ++e) {
    std::size_t at = rng() % s.size();
    switch (rng() % 3) {
      case 0:
        s[at] = static_cast<char>(rng() % 256);
        break;
      case 1:
        s.erase(at, 1 + rng() % 8);
        break;
      default:
        s.insert(at, 1, inserts[rng() % inserts.size()]);
        break;
    }
    if (s.empty()) s.push_back('{');
  }
}

}  // namespace troupe::serve
