// The CUDA kernels compiled as host C++ (see TROUPE_GPU_EMULATION in gpu/src/cuda/launch.cuh).
#include "../../../gpu/src/cuda/elementwise.cu"
#include "../../../gpu/src/cuda/embedding.cu"
#include "../../../gpu/src/cuda/loss.cu"
#include "../../../gpu/src/cuda/norms.cu"
#include "../../../gpu/src/cuda/optim.cu"
