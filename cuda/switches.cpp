// The CUDA layer's environment switches (cuda/switches.h).
#include <echelon/cuda/switches.h>

#include <echelon/base/env.h>

namespace echelon::cuda::switches {

bool sync_launches() {
  return env::flag("ECHELON_SYNC_LAUNCHES", false);
}

bool fma_warp_tiles() {
  return env::choice<bool>("ECHELON_FMA_CORE", true,
                           {{"warp", true}, {"new", true}, {"old", false}});
}

MmaTile mma_tile() {
  return env::choice<MmaTile>(
      "ECHELON_MMA_TILE", MmaTile::Auto,
      {{"auto", MmaTile::Auto}, {"64", MmaTile::Small}, {"128", MmaTile::Large}});
}

int mma_stages() {
  return env::choice<int>("ECHELON_MMA_STAGES", 2, {{"2", 2}, {"4", 4}});
}

bool mma_async_k() {
  return env::flag("ECHELON_MMA_ASYNC_K", false);
}

bool conv_gather_table() {
  return env::flag("ECHELON_CONV_GATHER_TABLE", true);
}

bool conv_async_gather() {
  return env::flag("ECHELON_CONV_ASYNC_GATHER", false);
}

int64_t conv_wgrad_fill() {
  constexpr int64_t kMostBlocks = int64_t{1} << 24;  // far beyond any GPU: a sanity bound
  return env::integer("ECHELON_CONV_WGRAD_FILL", 0, 0, kMostBlocks);
}

int64_t conv_wgrad_groups() {
  constexpr int64_t kMostGroups = 65535;  // the grid's z limit
  return env::integer("ECHELON_CONV_WGRAD_GROUPS", 0, 0, kMostGroups);
}

bool conv_wgrad_direct() {
  return env::flag("ECHELON_CONV_WGRAD_DIRECT", true);
}

bool conv_dgrad_phases() {
  return env::flag("ECHELON_CONV_DGRAD_PHASES", true);
}

bool conv_window() {
  return env::flag("ECHELON_CONV_WINDOW", true);
}

bool conv_autotune() {
  return env::flag("ECHELON_AUTOTUNE", false);
}

void check_all() {
  sync_launches();
  fma_warp_tiles();
  mma_tile();
  mma_stages();
  mma_async_k();
  conv_gather_table();
  conv_async_gather();
  conv_wgrad_fill();
  conv_wgrad_groups();
  conv_wgrad_direct();
  conv_dgrad_phases();
  conv_window();
  conv_autotune();
}

}  // namespace echelon::cuda::switches
