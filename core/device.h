// Where a tensor's memory lives.
//
//   Device d;                       // CPU (the default)
//   Device g = Device::CUDA(1);     // GPU 1 (tensors there need //core/cuda linked in)
//   std::string s = d.ToString();   // "cpu", "cuda:1"
#ifndef TPX_CORE_DEVICE_H_
#define TPX_CORE_DEVICE_H_

#include <cstdint>
#include <string>

namespace tpx {

enum class DeviceType : int32_t { kCPU = 0, kCUDA = 1 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device CPU() { return Device{DeviceType::kCPU, 0}; }
  static Device CUDA(int index) { return Device{DeviceType::kCUDA, index}; }

  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  std::string ToString() const;

  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.index == b.index;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

}  // namespace tpx

#endif  // TPX_CORE_DEVICE_H_
