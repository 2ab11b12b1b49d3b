// CUDA emulation build: stands in for CUB's header (see cuda/sim/cub.h).
#pragma once
#include <echelon/cuda/sim/cub.h>
