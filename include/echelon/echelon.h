// The one header for programs that use Echelon as a library:
//   find_package(echelon) + target_link_libraries(app PRIVATE echelon::echelon)
//   #include <echelon/echelon.h>
// It brings in the public interface of every layer, bottom to top. Finer-grained headers
// (<echelon/tensor/ops.h>, ...) stay available for programs that want less.
#pragma once

#include <echelon/app/bench.h>
#include <echelon/app/train.h>
#include <echelon/autograd/engine.h>
#include <echelon/autograd/functions.h>
#include <echelon/autograd/grad_mode.h>
#include <echelon/autograd/gradcheck.h>
#include <echelon/base/error.h>
#include <echelon/data/dataset.h>
#include <echelon/data/loader.h>
#include <echelon/data/registry.h>
#include <echelon/data/transforms.h>
#include <echelon/layers/layers.h>
#include <echelon/layers/lr_schedule.h>
#include <echelon/layers/models/registry.h>
#include <echelon/layers/optim.h>
#include <echelon/parallel/engine.h>
#include <echelon/parallel/loader_bench.h>
#include <echelon/parallel/model_bench.h>
#include <echelon/parallel/op_bench.h>
#include <echelon/parallel/pipeline.h>
#include <echelon/parallel/timing.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/random.h>
#include <echelon/tensor/safetensors.h>
#include <echelon/tensor/tensor.h>
