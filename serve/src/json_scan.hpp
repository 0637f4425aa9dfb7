// A strict JSON reader (RFC 8259) that drives a SAX handler, for the bodies of infer requests:
// thousands of numbers per request, which nlohmann's lexer (a std::string per token, strtod) read at
// ~150 ns each, half the front end's time per request; std::from_chars reads them in place.
//
// Contract:
// - The handler has nlohmann's SAX interface (null, boolean, number_integer, number_unsigned,
//   number_float, string, start_object, key, end_object, start_array, end_array); a callback that
//   returns false stops the scan (scan_json returns false, `error` left empty: the handler knows why).
// - Malformed text stops it with `error` set ("unexpected '}'", "unexpected end of input", ...) and
//   `error_at` the byte (from 1) where it was seen. Nothing is allocated for numbers; strings are
//   unescaped into one buffer that is reused.
// - Numbers: an integer token goes to number_integer (int64), or number_unsigned when only uint64
//   holds it, or number_float when neither does; a token with a fraction or an exponent to
//   number_float, correctly rounded (as strtod: Clinger's fast path where it is exact, else
//   from_chars); one beyond a double's range is refused.
// - Strings must be valid UTF-8 without raw control characters; \uXXXX escapes (surrogate pairs
//   included) become UTF-8. Nesting is bounded by the handler (it refuses deep input), and the
//   recursion by `max_depth` here as well.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "json_number.hpp"

namespace troupe::serve {

template <typename Handler>
class json_scanner {
 public:
  json_scanner(std::string_view text, Handler& h)
      : p_(text.data()), begin_(text.data()), end_(text.data() + text.size()), h_(h) {}

  bool run() {
    skip_ws();
    if (!value(0)) return false;
    skip_ws();
    if (p_ != end_) return fail("unexpected '" + printable(*p_) + "' after the JSON value");
    return true;
  }

  std::string error;
  std::size_t error_at = 0;
  static constexpr int max_depth = 256;

 private:
  bool fail(std::string what) {
    if (error.empty()) {
      error = std::move(what);
      error_at = static_cast<std::size_t>(p_ - begin_) + 1;
    }
    return false;
  }
  static std::string printable(char c) {
    if (static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f)
      return std::string(1, c);
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
    return buf;
  }
  void skip_ws() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool unexpected() {
    if (p_ == end_) return fail("unexpected end of input");
    return fail("unexpected '" + printable(*p_) + "'");
  }

  bool value(int depth) {
    if (p_ == end_) return unexpected();
    switch (*p_) {
      case '{':
        return object(depth + 1);
      case '[':
        return array(depth + 1);
      case '"':
        if (!string()) return false;
        return h_.string(buf_);
      case 't':
        return literal("true") && h_.boolean(true);
      case 'f':
        return literal("false") && h_.boolean(false);
      case 'n':
        return literal("null") && h_.null();
      default:
        if (*p_ == '-' || (*p_ >= '0' && *p_ <= '9')) return number();
        return unexpected();
    }
  }

  bool literal(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word)
      return fail("invalid literal");
    p_ += word.size();
    return true;
  }

  bool object(int depth) {
    if (depth > max_depth) return fail("nested deeper than " + std::to_string(max_depth));
    ++p_;
    if (!h_.start_object(static_cast<std::size_t>(-1))) return false;
    skip_ws();
    if (p_ != end_ && *p_ == '}') {
      ++p_;
      return h_.end_object();
    }
    for (;;) {
      skip_ws();
      if (p_ == end_ || *p_ != '"')
        return p_ == end_ ? unexpected() : fail("expected a key (a string), got '" + printable(*p_) + "'");
      if (!string()) return false;
      if (!h_.key(buf_)) return false;
      skip_ws();
      if (p_ == end_ || *p_ != ':')
        return p_ == end_ ? unexpected() : fail("expected ':', got '" + printable(*p_) + "'");
      ++p_;
      skip_ws();
      if (!value(depth)) return false;
      skip_ws();
      if (p_ != end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ != end_ && *p_ == '}') {
        ++p_;
        return h_.end_object();
      }
      return p_ == end_ ? unexpected() : fail("expected ',' or '}', got '" + printable(*p_) + "'");
    }
  }

  bool array(int depth) {
    if (depth > max_depth) return fail("nested deeper than " + std::to_string(max_depth));
    ++p_;
    if (!h_.start_array(static_cast<std::size_t>(-1))) return false;
    skip_ws();
    if (p_ != end_ && *p_ == ']') {
      ++p_;
      return h_.end_array();
    }
    for (;;) {
      skip_ws();
      if (!value(depth)) return false;
      skip_ws();
      if (p_ != end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ != end_ && *p_ == ']') {
        ++p_;
        return h_.end_array();
      }
      return p_ == end_ ? unexpected() : fail("expected ',' or ']', got '" + printable(*p_) + "'");
    }
  }

  static bool digit(char c) { return c >= '0' && c <= '9'; }

  void take_digits(number_parts& n, bool fraction) {
    const char* first = p_;
    if (n.digits == 0)  // leading zeros (of a fraction: "0.000123") are no significant digits
      while (p_ != end_ && *p_ == '0') ++p_;
    const char* significant = p_;
    std::uint64_t m = n.mantissa;  // wraps past 19 digits: long_mantissa says so, and it goes unused
    for (; p_ != end_ && digit(*p_); ++p_) m = m * 10 + static_cast<std::uint64_t>(*p_ - '0');
    n.digits += static_cast<int>(p_ - significant);
    if (n.digits > 19) n.long_mantissa = true;
    if (fraction) n.fraction += static_cast<int>(p_ - first);
    n.mantissa = m;
  }

  // The number token at p_ (RFC 8259's grammar: no leading zeros, no '+', digits on both sides of
  // '.'), p_ moved past it; `integer` false when it has a fraction or an exponent.
  bool number_token(bool& integer, number_parts& n) {
    integer = true;
    if (*p_ == '-') {
      n.negative = true;
      ++p_;
    }
    if (p_ == end_ || !digit(*p_)) return fail("invalid number");
    if (*p_ == '0')
      ++p_;
    else
      take_digits(n, false);
    if (p_ != end_ && *p_ == '.') {
      integer = false;
      ++p_;
      if (p_ == end_ || !digit(*p_)) return fail("invalid number: no digit after '.'");
      take_digits(n, true);
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      integer = false;
      ++p_;
      bool minus = false;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) minus = *p_++ == '-';
      if (p_ == end_ || !digit(*p_)) return fail("invalid number: no digit in the exponent");
      for (; p_ != end_ && digit(*p_); ++p_) {
        if (n.exponent > 9999)
          n.long_exponent = true;
        else
          n.exponent = n.exponent * 10 + (*p_ - '0');
      }
      if (minus) n.exponent = -n.exponent;
    }
    return true;
  }

  bool number() {
    const char* start = p_;
    bool integer = true;
    number_parts n;
    if (!number_token(integer, n)) return false;
    if (integer) {
      if (!n.long_mantissa && n.digits <= 18) {  // below 10^18: an int64 either way
        const auto m = static_cast<std::int64_t>(n.mantissa);
        return h_.number_integer(n.negative ? -m : m);
      }
      std::int64_t i = 0;
      if (auto r = std::from_chars(start, p_, i); r.ec == std::errc{} && r.ptr == p_)
        return h_.number_integer(i);
      std::uint64_t u = 0;
      if (*start != '-')
        if (auto r = std::from_chars(start, p_, u); r.ec == std::errc{} && r.ptr == p_)
          return h_.number_unsigned(u);
    }
    if (double d = 0; fast_double(n, d)) return h_.number_float(d, empty_);
    return real_number(start);
  }

  // The token [start, p_) as a double, correctly rounded; one beyond a double's range is refused.
  bool real_number(const char* start) {
    double d = 0;
    auto r = std::from_chars(start, p_, d);
    if (r.ec == std::errc::result_out_of_range) {
      p_ = start;
      return fail("number out of range: " +
                  std::string(start, std::min<std::size_t>(40, static_cast<std::size_t>(r.ptr - start))));
    }
    if (r.ec != std::errc{} || r.ptr != p_) {
      p_ = start;
      return fail("invalid number");
    }
    return h_.number_float(d, empty_);
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  bool hex4(unsigned& out) {
    if (end_ - p_ < 4) return fail("invalid \\u escape");
    out = 0;
    for (int k = 0; k < 4; ++k) {
      int v = hex(p_[k]);
      if (v < 0) return fail("invalid \\u escape");
      out = out * 16 + static_cast<unsigned>(v);
    }
    p_ += 4;
    return true;
  }
  void put_utf8(unsigned cp) {
    if (cp < 0x80) {
      buf_.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      buf_.push_back(static_cast<char>(0xc0 | (cp >> 6)));
      buf_.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      buf_.push_back(static_cast<char>(0xe0 | (cp >> 12)));
      buf_.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      buf_.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      buf_.push_back(static_cast<char>(0xf0 | (cp >> 18)));
      buf_.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      buf_.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      buf_.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }
  // One UTF-8 sequence of raw bytes starting at p_ (not ASCII), copied; false when invalid.
  bool utf8_sequence() {
    auto b = static_cast<unsigned char>(*p_);
    int n = b >= 0xc2 && b <= 0xdf ? 1 : b >= 0xe0 && b <= 0xef ? 2 : b >= 0xf0 && b <= 0xf4 ? 3 : -1;
    if (n < 0 || end_ - p_ <= n) return fail("invalid UTF-8 in a string");
    auto c1 = static_cast<unsigned char>(p_[1]);
    // Overlong forms, surrogates and code points past U+10FFFF.
    if ((b == 0xe0 && c1 < 0xa0) || (b == 0xed && c1 > 0x9f) || (b == 0xf0 && c1 < 0x90) ||
        (b == 0xf4 && c1 > 0x8f))
      return fail("invalid UTF-8 in a string");
    for (int k = 1; k <= n; ++k)
      if ((static_cast<unsigned char>(p_[k]) & 0xc0) != 0x80) return fail("invalid UTF-8 in a string");
    buf_.append(p_, static_cast<std::size_t>(n + 1));
    p_ += n + 1;
    return true;
  }
  bool string() {
    ++p_;
    buf_.clear();
    for (;;) {
      const char* run = p_;
      while (p_ != end_ && *p_ != '"' && *p_ != '\\' && static_cast<unsigned char>(*p_) >= 0x20 &&
             static_cast<unsigned char>(*p_) < 0x80)
        ++p_;
      buf_.append(run, static_cast<std::size_t>(p_ - run));
      if (p_ == end_) return fail("unexpected end of input in a string");
      char c = *p_;
      if (c == '"') {
        ++p_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) return fail("a control character in a string (escape it)");
      if (static_cast<unsigned char>(c) >= 0x80) {
        if (!utf8_sequence()) return false;
        continue;
      }
      if (!escape()) return false;
    }
  }

  // The escape at p_ (its backslash), unescaped into buf_.
  bool escape() {
    ++p_;
    if (p_ == end_) return fail("unexpected end of input in a string");
    char c = *p_++;
    if (c == 'u') return unicode_escape();
    char out = simple_escape(c);
    if (out == 0) {
      --p_;
      return fail("invalid escape '\\" + printable(*p_) + "'");
    }
    buf_.push_back(out);
    return true;
  }

  // What \<c> stands for; 0 when it is not one of JSON's escapes.
  static char simple_escape(char c) {
    switch (c) {
      case '"':
        return '"';
      case '\\':
        return '\\';
      case '/':
        return '/';
      case 'b':
        return '\b';
      case 'f':
        return '\f';
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      default:
        return 0;
    }
  }

  // The XXXX of a \uXXXX at p_ (a high surrogate must be followed by a \u of its low one), put
  // into buf_ as UTF-8; a lone surrogate is refused.
  bool unicode_escape() {
    unsigned cp = 0;
    if (!hex4(cp)) return false;
    if (cp >= 0xd800 && cp <= 0xdbff) {
      unsigned lo = 0;
      if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return fail("a lone surrogate in a \\u escape");
      p_ += 2;
      if (!hex4(lo)) return false;
      if (lo < 0xdc00 || lo > 0xdfff) return fail("a lone surrogate in a \\u escape");
      cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    } else if (cp >= 0xdc00 && cp <= 0xdfff) {
      return fail("a lone surrogate in a \\u escape");
    }
    put_utf8(cp);
    return true;
  }

  const char* p_;
  const char* begin_;
  const char* end_;
  Handler& h_;
  std::string buf_;
  const std::string empty_;
};

}  // namespace troupe::serve
