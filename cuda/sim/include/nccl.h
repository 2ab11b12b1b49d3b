// CUDA emulation build (ECHELON_CUDA_SIM) with MPI: stands in for NCCL (see cuda/sim/nccl.h).
#pragma once
#include <echelon/cuda/sim/nccl.h>
