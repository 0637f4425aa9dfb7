#include "troupe/core/float_env.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace troupe {

namespace {

// The thread's floating-point control register and its flush bits, per architecture.
#if defined(__x86_64__) || defined(__i386__)
constexpr bool has_mode = true;
constexpr unsigned flush_bits = 0x8000u | 0x0040u;  // MXCSR: FTZ (bit 15), DAZ (bit 6)
unsigned mode() {
  return _mm_getcsr();
}
void set_mode(unsigned v) {
  _mm_setcsr(v);
}
#elif defined(__aarch64__)
constexpr bool has_mode = true;
constexpr std::uint64_t flush_bits = std::uint64_t{1} << 24;  // FPCR.FZ
std::uint64_t mode() {
  std::uint64_t v;
  asm volatile("mrs %0, fpcr" : "=r"(v));
  return v;
}
void set_mode(std::uint64_t v) {
  asm volatile("msr fpcr, %0" : : "r"(v));
}
#else
constexpr bool has_mode = false;
constexpr unsigned flush_bits = 0;
unsigned mode() {
  return 0;
}
void set_mode(unsigned) {}
#endif

}  // namespace

bool flush_denormals() {
  if (!has_mode) return false;
  set_mode(mode() | flush_bits);
  return true;
}

bool flush_denormals_unless_kept() {
  if (const char* keep = std::getenv("TROUPE_KEEP_DENORMALS"); keep && std::string_view(keep) == "1")
    return false;
  return flush_denormals();
}

bool denormals_flushed() {
  return has_mode && (mode() & flush_bits) == flush_bits;
}

}  // namespace troupe
