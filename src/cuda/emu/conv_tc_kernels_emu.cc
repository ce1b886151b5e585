// The tensor-core conv kernels compiled for the CPU emulator (see emu_runtime.h).
#include "cuda/conv_tc_kernels.cu"
