// The GPU feed's kernels compiled for the CPU emulator (see emu_runtime.h).
#include "cuda/feed_kernels.cu"
