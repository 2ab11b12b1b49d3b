// Every parameter of a model, copied to the host and concatenated in parameters() order: the
// form the engine tests compare bit for bit between two runs.
#pragma once

#include <vector>

#include <echelon/layers/module.h>

namespace echelon::test {

inline std::vector<float> flat_parameters(Module& model) {
  std::vector<float> all;
  for (const Tensor& p : model.parameters()) {
    const std::vector<float> v = p.cpu().to_vector<float>();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

}  // namespace echelon::test
