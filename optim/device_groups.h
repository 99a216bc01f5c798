// Indices of tensors grouped by the device they live on, in order of first
// appearance, each group in index order: the optimizers hand each device
// all of its tensors in one call (ops::AdamWSteps, ops::SumsOfSquares).
// Internal to optim/.
#ifndef TPX_OPTIM_DEVICE_GROUPS_H_
#define TPX_OPTIM_DEVICE_GROUPS_H_

#include <cstddef>
#include <vector>

#include "core/device.h"

namespace tpx::optim {

inline std::vector<std::vector<size_t>> GroupByDevice(const std::vector<Device>& devices) {
  std::vector<std::vector<size_t>> groups;
  std::vector<Device> seen;
  for (size_t i = 0; i < devices.size(); ++i) {
    size_t g = 0;
    while (g < seen.size() && !(seen[g] == devices[i])) ++g;
    if (g == seen.size()) {
      seen.push_back(devices[i]);
      groups.emplace_back();
    }
    groups[g].push_back(i);
  }
  return groups;
}

}  // namespace tpx::optim

#endif  // TPX_OPTIM_DEVICE_GROUPS_H_
