// CUDA emulation build (ECHELON_CUDA_SIM): stands in for the CUDA runtime header. Host code
// gets the runtime API (cuda/sim/api.h), .cu files also the device language (cuda/sim/device.h).
#pragma once
#include <echelon/cuda/sim/api.h>
#include <echelon/cuda/sim/device.h>
