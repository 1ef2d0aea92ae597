// Logging: spdlog behind ferry's names, to stderr. Structured (JSON) request logs are the
// server's business; this is for operator-facing messages.
#pragma once

#include <spdlog/spdlog.h>

namespace ferry {

enum class LogLevel { kDebug, kInfo, kWarn, kError, kOff };
void SetLogLevel(LogLevel level);

}  // namespace ferry

#define FERRY_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define FERRY_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define FERRY_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define FERRY_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
