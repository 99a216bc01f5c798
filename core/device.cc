#include "core/device.h"

namespace tpx {

std::string Device::ToString() const {
  if (type == DeviceType::kCPU) return "cpu";
  return "cuda:" + std::to_string(index);
}

}  // namespace tpx
