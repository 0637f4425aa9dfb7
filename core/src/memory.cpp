#include "troupe/core/memory.hpp"

#include <malloc.h>

namespace troupe {

void keep_large_buffers() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit)
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

}  // namespace troupe
