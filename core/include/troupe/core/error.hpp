// The error model: every recoverable failure is a value, `troupe::error`, carrying a
// std::error_code (a per-module enum, see core_errc below and each module's errc.hpp) and a
// context string naming the thing that failed (file, key, record, peer...). Exceptions from
// third-party code stop at the wrapper that calls it and become one of these.
#pragma once

#include <string>
#include <system_error>
#include <utility>
#include <variant>

namespace troupe {

// A module's error category that says which of its codes have contexts naming the problem in words
// (nn's "bad configuration": "model 'deepfm': is a binary (CTR) model, the data has 4 classes"):
// error::describe() shows those contexts alone, as it does core's. A plain std::error_category's
// never are.
class error_category : public std::error_category {
 public:
  virtual bool context_says_it(int code) const noexcept = 0;
};

class error {
 public:
  error() = default;
  error(std::error_code code, std::string context) : code_(code), context_(std::move(context)) {}

  const std::error_code& code() const noexcept { return code_; }
  const std::string& context() const noexcept { return context_; }
  explicit operator bool() const noexcept { return static_cast<bool>(code_); }

  // "<category>: <message>: <context>", e.g. "config: wrong type: job.toml: key 'job.workers': ...".
  std::string to_string() const;

  // What a person at a terminal reads (the CLI's "troupe: error: ..." line): a core error's
  // context alone, since core contexts name the problem in words ("a.toml:2: key 'job.workers':
  // expected an integer, got a string"; the module and code only repeat it), and so the context of
  // a code its error_category says the same of; any other error, or one without context, as
  // to_string(). Logs and timeline events keep to_string().
  std::string describe() const;

  // Prepends more context: "outer: inner-context".
  error& wrap(const std::string& outer);

  friend bool operator==(const error& e, std::error_code c) noexcept { return e.code_ == c; }
  template <class Enum, class = std::enable_if_t<std::is_error_code_enum_v<Enum>>>
  friend bool operator==(const error& e, Enum c) noexcept {
    return e.code_ == std::error_code(c);
  }

 private:
  std::error_code code_;
  std::string context_;
};

// Tag to construct an expected<T> holding an error.
struct unexpected {
  error err;
};
inline unexpected make_unexpected(error e) {
  return {std::move(e)};
}
template <class Enum>
unexpected make_unexpected(Enum c, std::string context) {
  return {error(std::error_code(c), std::move(context))};
}

// A value or an error. Accessing value() of an error state throws std::logic_error (a bug).
template <class T>
class [[nodiscard]] expected {
 public:
  expected(T v) : state_(std::in_place_index<0>, std::move(v)) {}
  expected(unexpected u) : state_(std::in_place_index<1>, std::move(u.err)) {}
  expected(error e) : state_(std::in_place_index<1>, std::move(e)) {}

  bool has_value() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  T& value() & {
    check();
    return std::get<0>(state_);
  }
  const T& value() const& {
    check();
    return std::get<0>(state_);
  }
  T&& value() && {
    check();
    return std::get<0>(std::move(state_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const error& err() const& { return std::get<1>(state_); }
  error&& err() && { return std::get<1>(std::move(state_)); }

 private:
  void check() const;
  std::variant<T, error> state_;
};

template <>
class [[nodiscard]] expected<void> {
 public:
  expected() = default;
  expected(unexpected u) : err_(std::move(u.err)) {}
  expected(error e) : err_(std::move(e)) {}
  bool has_value() const noexcept { return !err_; }
  explicit operator bool() const noexcept { return has_value(); }
  const error& err() const& { return err_; }
  error&& err() && { return std::move(err_); }

 private:
  error err_;
};

[[noreturn]] void throw_bad_expected_access(const error& e);

template <class T>
void expected<T>::check() const {
  if (state_.index() != 0) throw_bad_expected_access(std::get<1>(state_));
}

// Errors of the core module itself (configuration, flags, ids, I/O on plain files).
enum class core_errc {
  ok = 0,
  io_error = 1,          // a file could not be read or written
  parse_error = 2,       // malformed text (TOML, a number, an id)
  missing_key = 3,       // a required configuration key is absent
  wrong_type = 4,        // a configuration value has the wrong type
  out_of_range = 5,      // a value is outside its allowed range
  unknown_key = 6,       // a configuration key nobody reads (likely a typo)
  invalid_argument = 7,  // a flag or argument that makes no sense
  not_built = 8,         // a part this build left out (an optional dependency absent when it was built)
};
// The exit code of a command that failed for want of a part this build left out (core_errc::
// not_built): the runner tells "built without libtorch" from a failed `troupe export` by it.
inline constexpr int exit_not_built = 4;
const std::error_category& core_category() noexcept;
inline std::error_code make_error_code(core_errc e) noexcept {
  return {static_cast<int>(e), core_category()};
}

}  // namespace troupe

template <>
struct std::is_error_code_enum<troupe::core_errc> : std::true_type {};
