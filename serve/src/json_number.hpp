// A JSON number token's parts as json_scan.hpp reads them, and the double they make where that is
// exact without from_chars (Clinger's fast path).
#pragma once

#include <cstdint>

namespace troupe::serve {

// Its significant digits (up to 19) as an integer, how many digits follow '.', and the exponent.
struct number_parts {
  std::uint64_t mantissa = 0;
  int digits = 0;    // significant digits in `mantissa` (leading zeros not counted)
  int fraction = 0;  // digits after '.' (taken into `mantissa`, or leading zeros)
  int exponent = 0;
  bool negative = false, long_mantissa = false, long_exponent = false;
};

// Up to 15 significant digits are exact in a double, as are 10^0..10^22, and one IEEE
// multiplication or division of exact operands is correctly rounded: the very double from_chars
// gives, at about half its cost (most of a batched request's parsing). False: not exact this way
// (more digits, a larger power): from_chars must read the token.
inline bool fast_double(const number_parts& n, double& out) {
  const int scale = n.exponent - n.fraction;
  if (n.long_mantissa || n.long_exponent || n.digits > 15 || scale < -22 || scale > 22) return false;
  static constexpr double powers[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                      1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  const auto m = static_cast<double>(n.mantissa);
  const double d = scale < 0 ? m / powers[-scale] : m * powers[scale];
  out = n.negative ? -d : d;
  return true;
}

}  // namespace troupe::serve
