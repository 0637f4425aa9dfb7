// The first line of every test that needs a GPU: skips with the runtime's reason when this build
// has no CUDA or the machine has no driver/device.
#pragma once

#include <gtest/gtest.h>

#include "troupe/gpu/cuda.hpp"

#define TROUPE_REQUIRE_GPU()                                                     \
  do {                                                                           \
    auto troupe_gpu_count_ = ::troupe::gpu::device_count();                      \
    if (!troupe_gpu_count_) GTEST_SKIP() << troupe_gpu_count_.err().to_string(); \
  } while (0)
