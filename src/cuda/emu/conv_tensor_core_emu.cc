// The tensor-core convolutions' driver compiled for the CPU emulator (see emu_runtime.h).
#include "cuda/conv/tensor_core.cu"
