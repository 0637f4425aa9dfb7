#include "troupe/core/float_env.hpp"

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace troupe {

namespace {
#if defined(__x86_64__) || defined(__i386__)
constexpr unsigned ftz_daz = 0x8000u | 0x0040u;  // MXCSR bit 15 (FTZ), bit 6 (DAZ)
#elif defined(__aarch64__)
constexpr std::uint64_t fpcr_fz = std::uint64_t{1} << 24;
std::uint64_t fpcr() {
  std::uint64_t v;
  asm volatile("mrs %0, fpcr" : "=r"(v));
  return v;
}
#endif
}  // namespace

bool flush_denormals() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_setcsr(_mm_getcsr() | ftz_daz);
  return true;
#elif defined(__aarch64__)
  asm volatile("msr fpcr, %0" : : "r"(fpcr() | fpcr_fz));
  return true;
#else
  return false;
#endif
}

bool denormals_flushed() {
#if defined(__x86_64__) || defined(__i386__)
  return (_mm_getcsr() & ftz_daz) == ftz_daz;
#elif defined(__aarch64__)
  return (fpcr() & fpcr_fz) != 0;
#else
  return false;
#endif
}

}  // namespace troupe
