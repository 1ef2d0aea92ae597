// A prepared linear weight as bytes for an engine file.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace ferry::kernels {

// A JSON description of the layout and the blobs it refers to (in order). Blobs given back
// for loading may be read-only views into an mmap'd file; a backend keeps them (not copies)
// when it can.
struct SerializedLinear {
  std::string layout_json;
  std::vector<Tensor> blobs;
};

}  // namespace ferry::kernels
