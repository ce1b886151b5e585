// The element-wise kernels compiled for the CPU emulator (see emu_runtime.h).
#include "cuda/ops_kernels.cu"
