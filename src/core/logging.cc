#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace ferry {

void SetLogLevel(LogLevel level) {
  static const bool init = [] {
    auto logger = spdlog::stderr_color_mt("ferry");
    logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
    spdlog::set_default_logger(logger);
    return true;
  }();
  (void)init;
  switch (level) {
    case LogLevel::kDebug: spdlog::set_level(spdlog::level::debug); break;
    case LogLevel::kInfo: spdlog::set_level(spdlog::level::info); break;
    case LogLevel::kWarn: spdlog::set_level(spdlog::level::warn); break;
    case LogLevel::kError: spdlog::set_level(spdlog::level::err); break;
    case LogLevel::kOff: spdlog::set_level(spdlog::level::off); break;
  }
}

}  // namespace ferry
