// The convolution families' shared code (common.cu) compiled for the CPU emulator
// (see emu_runtime.h).
#include "cuda/conv/common.cu"
