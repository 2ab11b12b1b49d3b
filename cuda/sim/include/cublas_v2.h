// CUDA emulation build (ECHELON_CUDA_SIM): stands in for cuBLAS (see cuda/sim/cublas.h).
#pragma once
#include <echelon/cuda/sim/cublas.h>
