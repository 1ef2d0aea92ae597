// What a CPU engine is tied to: the instruction set its kernels were chosen for, and the
// oneDNN version beside them.
#include <oneapi/dnnl/dnnl.h>

#include <string>

#include "backend/cpu_backend.h"

namespace ferry::backend {

namespace {

std::string CpuIsa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2")) return "avx2";
  return "baseline";
}

// An ISA name this ferry does not know ranks lowest: only a known, stronger ISA is refused.
int IsaRank(const std::string& isa) { return isa == "avx512" ? 2 : isa == "avx2" ? 1 : 0; }

}  // namespace

Result<io::EngineFingerprint> CpuBackend::Fingerprint() const {
  io::EngineFingerprint fp;
  fp.device = "cpu";
  fp.cpu_isa = CpuIsa();
  const dnnl_version_t* v = dnnl_version();
  fp.onednn_version = std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  return fp;
}

Status CpuBackend::CheckFingerprint(const io::EngineFingerprint& fp) const {
  if (fp.device != "cpu") return FailedPrecondition("engine was built for device '" + fp.device + "', not the CPU");
  const std::string here = CpuIsa();
  if (IsaRank(fp.cpu_isa) > IsaRank(here)) {
    return FailedPrecondition("engine was built for CPU ISA '" + fp.cpu_isa + "', this CPU only has '" + here + "'");
  }
  return Status::Ok();
}

}  // namespace ferry::backend
