// Process-wide allocator settings of troupe's processes.
#pragma once

namespace troupe {

// A node allocates and frees MiB-sized buffers at a high rate: message frames and their Cap'n
// Proto segments (served records, PS replies, checkpoints), a task's rows. glibc serves a block
// over its mmap threshold with fresh pages (a page fault and a kernel zeroing per 4 KiB) and
// trims freed heap above its trim threshold back to the kernel, so each such buffer is faulted
// in again (docs/benchmarks.md "Served records: requests in flight...": glibc's settings against
// these, same run). This keeps blocks up to 32 MiB in the heap and 256 MiB of free heap before
// trimming. Call once, first in main(), before threads start.
void keep_large_buffers();

}  // namespace troupe
