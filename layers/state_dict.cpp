#include <echelon/layers/state_dict.h>

#include <echelon/base/error.h>

namespace echelon {

void StateDict::insert(const std::string& name, const Tensor& value) {
  auto it = index_.find(name);
  if (it != index_.end()) {
    items_[it->second].second = value;
    return;
  }
  index_.emplace(name, items_.size());
  items_.emplace_back(name, value);
}

const Tensor& StateDict::at(const std::string& name) const {
  const Tensor* found = find(name);
  ECH_CHECK(found, "state dict: no entry named '", name, "'");
  return *found;
}

const Tensor* StateDict::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const Item& item : items_) out.push_back(item.first);
  return out;
}

}  // namespace echelon
