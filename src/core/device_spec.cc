#include "core/device_spec.h"

namespace ferry {

std::string DeviceSpec::ToString() const {
  if (kind == DeviceKind::kCpu) return "cpu";
  return index == 0 ? std::string("cuda") : "cuda:" + std::to_string(index);
}

Result<DeviceSpec> ParseDevice(std::string_view text) {
  if (text == "cpu") return DeviceSpec::Cpu();
  if (text == "cuda") return DeviceSpec::Cuda(0);
  constexpr std::string_view kPrefix = "cuda:";
  if (text.substr(0, kPrefix.size()) == kPrefix) {
    const std::string_view digits = text.substr(kPrefix.size());
    // Up to four digits: no GPU index is larger, and the value cannot overflow.
    if (!digits.empty() && digits.size() <= 4 && digits.find_first_not_of("0123456789") == std::string_view::npos) {
      return DeviceSpec::Cuda(std::stoi(std::string(digits)));
    }
  }
  return InvalidArgument("device must be cpu, cuda or cuda:N, got '" + std::string(text) + "'");
}

}  // namespace ferry
