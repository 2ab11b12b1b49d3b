// An insertion-ordered name -> Tensor map: module state (parameters then buffers, PyTorch names)
// and optimizer state. Order is the module's registration order, so checkpoints are stable.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <echelon/tensor/tensor.h>

namespace echelon {

class StateDict {
 public:
  using Item = std::pair<std::string, Tensor>;

  // Adds or replaces `name` (a replaced entry keeps its position).
  void insert(const std::string& name, const Tensor& value);
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Throws echelon::Error naming the key when absent.
  const Tensor& at(const std::string& name) const;
  const Tensor* find(const std::string& name) const;  // nullptr when absent
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const;

  std::vector<Item>::const_iterator begin() const { return items_.begin(); }
  std::vector<Item>::const_iterator end() const { return items_.end(); }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace echelon
