// The CUDA layer's environment switches (docs/environment.md), parsed in one place by base/env.h.
// Each function reads its variable now (unset or empty: the default) and throws echelon::Error
// on a value it does not accept. The kernels read their switch once (matmul.cu, conv_gemm.cu,
// conv_tune.cu, conv_direct.cu, conv_phases.cu, conv_window.cu); check_all() reads every one at
// the first kernel launch (cuda/check.h), so a bad value fails the run there even when the run
// never takes the path it selects (a typo in ECHELON_MMA_STAGES in an fp32 run).
#pragma once

#include <cstdint>

#include <echelon/cuda/kernels/matmul.h>

namespace echelon::cuda::switches {

bool sync_launches();         // ECHELON_SYNC_LAUNCHES: flag, off
bool fma_warp_tiles();        // ECHELON_FMA_CORE: warp (or new) | old
MmaTile mma_tile();           // ECHELON_MMA_TILE: auto | 64 | 128
int mma_stages();             // ECHELON_MMA_STAGES: 2 | 4
bool mma_async_k();           // ECHELON_MMA_ASYNC_K: flag, off
bool conv_gather_table();     // ECHELON_CONV_GATHER_TABLE: flag, on
bool conv_async_gather();     // ECHELON_CONV_ASYNC_GATHER: flag, off
int64_t conv_wgrad_fill();    // ECHELON_CONV_WGRAD_FILL: 0 (the built-in target) .. 2^24
int64_t conv_wgrad_groups();  // ECHELON_CONV_WGRAD_GROUPS: 0 (the heuristic) .. 65535
bool conv_wgrad_direct();     // ECHELON_CONV_WGRAD_DIRECT: flag, on
bool conv_dgrad_phases();     // ECHELON_CONV_DGRAD_PHASES: flag, on
bool conv_window();           // ECHELON_CONV_WINDOW: flag, on
bool conv_autotune();         // ECHELON_AUTOTUNE: flag, off

void check_all();

}  // namespace echelon::cuda::switches
