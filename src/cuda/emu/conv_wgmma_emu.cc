// The wgmma convolution kernels compiled for the CPU emulator (see emu_runtime.h).
#include "cuda/conv/wgmma.cu"
