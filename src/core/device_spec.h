// The device a model runs on or an engine is built for, as a user names it: "cpu", "cuda"
// (GPU 0) or "cuda:N". Parsed once where the text enters (a command-line flag, the server's
// YAML), then passed inward as this value.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "core/tensor.h"

namespace ferry {

// Value type.
struct DeviceSpec {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;  // which GPU; 0 for the CPU

  static DeviceSpec Cpu() { return {}; }
  static DeviceSpec Cuda(int index = 0) { return {DeviceKind::kCuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool is_cuda() const { return kind == DeviceKind::kCuda; }
  // Where tensors on this device live.
  Device device() const { return {kind, index}; }
  // "cpu", "cuda" (GPU 0) or "cuda:N": the name ParseDevice reads back.
  std::string ToString() const;
  bool operator==(const DeviceSpec&) const = default;
};

// "cpu", "cuda" or "cuda:N" (N a GPU index below 10000); InvalidArgument naming the
// accepted forms for anything else.
Result<DeviceSpec> ParseDevice(std::string_view text);

}  // namespace ferry
