#include "age.hpp"

#include <exception>

namespace troupe::cli {

std::optional<double> age_seconds(const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const std::string unit = text.substr(used);
  const double per = unit == "s"   ? 1
                     : unit == "m" ? 60
                     : unit == "h" ? 3600
                     : unit == "d" ? 86400
                     : unit == "w" ? 7 * 86400
                                   : -1;
  if (per < 0 || !(v >= 0) || v > 1e7) return std::nullopt;
  return v * per;
}

std::string age_refusal(const std::string& t) {
  if (!t.empty() && t.find_first_not_of("0123456789.") == std::string::npos)
    return "--older-than " + t + ": give its unit (" + t + "d: " + t + " days, " + t + "h, " + t + "m, " + t +
           "s, " + t + "w)";
  return "--older-than " + t + ": not an age (a number with s, m, h, d or w: 7d, 12h)";
}

}  // namespace troupe::cli
