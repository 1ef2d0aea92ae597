// The default calibration text of `ferry build --precision int8`:
// data/calibration/kjv_calibration.jsonl, compiled into the binary at build time
// (cmake/embed_text.cmake), so that an installed or moved ferry needs no data files and
// no path to the source tree.
#pragma once

#include <string_view>

namespace ferry::engine {

// The JSONL text, one {"book", "chapter", "text"} chapter a line.
std::string_view DefaultCalibrationText();

// How engine manifests and build reports name it (`build.calibration.path`).
inline constexpr std::string_view kDefaultCalibrationName = "built-in:kjv_calibration.jsonl";

}  // namespace ferry::engine
