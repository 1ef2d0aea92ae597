#include "io/engine_manifest.h"

#include <set>
#include <tuple>

#include "core/json_limits.h"
#include "io/json_reader.h"

namespace ferry::io {

namespace {

using json = nlohmann::json;

constexpr const char* kWhat = "engine manifest";

const char* FamilyName(ModelFamily f) { return f == ModelFamily::kDecoder ? "decoder" : "encoder"; }

Result<BlobRef> ReadBlobRef(const json& j, const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(const JsonReader r, JsonReader::Open(j, kWhat, path));
  BlobRef ref;
  FERRY_RETURN_IF_ERROR(r.Integer("offset", ref.offset, true));
  FERRY_RETURN_IF_ERROR(r.Integer("bytes", ref.bytes, true));
  FERRY_RETURN_IF_ERROR(r.Integer("crc32c", ref.crc32c, true));
  return ref;
}

json TensorToJson(const StoredTensor& t) {
  return {{"dtype", std::string(DTypeName(t.dtype))}, {"shape", t.shape}, {"blob", t.blob.ToJson()}};
}

// A tensor entry: dtype, shape and a blob whose size is exactly what they need.
Result<StoredTensor> ReadTensor(const json& j, const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(const JsonReader r, JsonReader::Open(j, kWhat, path));
  StoredTensor t;
  std::string dtype;
  FERRY_RETURN_IF_ERROR(r.String("dtype", dtype, true));
  auto parsed = ParseDType(dtype);
  if (!parsed.ok()) return r.FieldError("dtype", "is not a dtype", json(dtype));
  t.dtype = *parsed;
  FERRY_ASSIGN_OR_RETURN(const json* shape, r.Array("shape"));
  uint64_t numel = 1;
  bool overflow = false;
  for (size_t i = 0; i < shape->size(); ++i) {
    int64_t d = 0;
    const Status s = r.ReadInteger((*shape)[i], r.FieldPath("shape") + "[" + std::to_string(i) + "]", d);
    if (!s.ok() || d < 0) return r.FieldError("shape", "must hold non-negative integers", *shape);
    t.shape.push_back(d);
    overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel);
  }
  FERRY_RETURN_IF_ERROR(r.Require("blob"));
  FERRY_ASSIGN_OR_RETURN(t.blob, ReadBlobRef(*r.Find("blob"), r.FieldPath("blob")));
  uint64_t bytes = 0;
  overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(DTypeSize(t.dtype)), &bytes);
  if (overflow || bytes != t.blob.bytes) {
    return r.Error("has a blob of " + std::to_string(t.blob.bytes) + " bytes, but " + ShapeToString(t.shape) + " x " +
                   std::string(DTypeName(t.dtype)) + (overflow ? " overflows" : " needs " + std::to_string(bytes)));
  }
  return t;
}

Result<StoredLinear> ReadLinear(const json& j, const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(const JsonReader r, JsonReader::Open(j, kWhat, path));
  StoredLinear l;
  FERRY_ASSIGN_OR_RETURN(const JsonReader layout, r.Object("layout"));
  l.layout = layout.value();
  FERRY_ASSIGN_OR_RETURN(const json* blobs, r.Array("blobs"));
  for (size_t i = 0; i < blobs->size(); ++i) {
    const std::string blob_path = r.FieldPath("blobs") + "[" + std::to_string(i) + "]";
    FERRY_ASSIGN_OR_RETURN(StoredTensor t, ReadTensor((*blobs)[i], blob_path));
    l.blobs.push_back(std::move(t));
  }
  if (r.Find("small_m_max") != nullptr) {
    int v = 0;
    FERRY_RETURN_IF_ERROR(r.Integer("small_m_max", v));
    l.small_m_max = v;
  }
  return l;
}

Status ReadIds(const JsonReader& r, std::string_view key, std::vector<int>& out) {
  const json* v = r.Find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_array()) return r.FieldError(key, "must be an array of token ids", *v);
  out.clear();
  for (size_t i = 0; i < v->size(); ++i) {
    int id = 0;
    FERRY_RETURN_IF_ERROR(r.ReadInteger((*v)[i], r.FieldPath(key) + "[" + std::to_string(i) + "]", id));
    out.push_back(id);
  }
  return Status::Ok();
}

Result<ManifestModel> ReadModel(const JsonReader& root) {
  FERRY_ASSIGN_OR_RETURN(const JsonReader r, root.Object("model"));
  ManifestModel m;
  std::string family;
  FERRY_RETURN_IF_ERROR(r.String("family", family, true));
  if (family == "decoder") {
    m.family = ModelFamily::kDecoder;
  } else if (family == "encoder") {
    m.family = ModelFamily::kEncoder;
  } else {
    return r.FieldError("family", "must be \"decoder\" or \"encoder\"", json(family));
  }
  FERRY_RETURN_IF_ERROR(r.String("model_type", m.model_type, true));
  // Required: the loader takes the stop ids from here (config.json alone lacks those of
  // generation_config.json).
  FERRY_RETURN_IF_ERROR(r.Require("eos_token_ids"));
  FERRY_RETURN_IF_ERROR(ReadIds(r, "eos_token_ids", m.eos_token_ids));
  FERRY_RETURN_IF_ERROR(r.Require("bos_token_ids"));
  FERRY_RETURN_IF_ERROR(ReadIds(r, "bos_token_ids", m.bos_token_ids));
  return m;
}

Result<CalibrationInfo> ReadCalibration(const JsonReader& build) {
  FERRY_ASSIGN_OR_RETURN(const JsonReader r, build.Object("calibration"));
  CalibrationInfo c;
  FERRY_RETURN_IF_ERROR(r.String("path", c.path));
  FERRY_RETURN_IF_ERROR(r.Integer("documents", c.documents));
  FERRY_RETURN_IF_ERROR(r.Integer("tokens", c.tokens));
  FERRY_RETURN_IF_ERROR(r.Double("alpha", c.alpha));
  FERRY_RETURN_IF_ERROR(r.Integer("layers", c.layers));
  FERRY_RETURN_IF_ERROR(r.Bool("synthetic_token_ids", c.synthetic_token_ids));
  return c;
}

Result<ManifestBuild> ReadBuild(const JsonReader& root) {
  FERRY_ASSIGN_OR_RETURN(const JsonReader r, root.Object("build"));
  ManifestBuild b;
  std::string text;
  FERRY_RETURN_IF_ERROR(r.String("precision", text, true));
  auto precision = ParsePrecision(text);
  if (!precision.ok()) return r.FieldError("precision", "is not a precision", json(text));
  b.precision = *precision;
  FERRY_RETURN_IF_ERROR(r.String("device", text, true));
  auto device = ParseDevice(text);
  if (!device.ok()) return r.FieldError("device", "is not a device", json(text));
  b.device = *device;
  FERRY_RETURN_IF_ERROR(r.String("weight_format", b.weight_format, true));
  FERRY_RETURN_IF_ERROR(r.Integer("max_seq_len", b.max_seq_len, true));
  FERRY_RETURN_IF_ERROR(r.Integer("max_batch_tokens", b.max_batch_tokens, true));
  FERRY_RETURN_IF_ERROR(r.String("source", b.source, true));
  if (r.Find("activations") != nullptr) {
    FERRY_RETURN_IF_ERROR(r.String("activations", text));
    auto dtype = ParseDType(text);
    if (!dtype.ok()) return r.FieldError("activations", "is not a dtype", json(text));
    b.activations = *dtype;
  }
  if (r.Find("calibration") != nullptr) {
    FERRY_ASSIGN_OR_RETURN(b.calibration, ReadCalibration(r));
  }
  if (r.Find("fp8_accumulation") != nullptr) {
    FERRY_RETURN_IF_ERROR(r.String("fp8_accumulation", text));
    if (text != "fast" && text != "exact") return r.FieldError("fp8_accumulation", "is not fast or exact", json(text));
    b.fp8_accumulation = text;
  }
  return b;
}

Status CheckExtent(const NamedBlob& b, uint64_t data_begin, uint64_t data_end) {
  const BlobRef& ref = b.blob;
  const std::string where = std::string(kWhat) + ": the blob of '" + b.name + "' (" + std::to_string(ref.bytes) +
                            " bytes at offset " + std::to_string(ref.offset) + ")";
  if (ref.offset < data_begin || ref.offset > data_end || ref.bytes > data_end - ref.offset) {
    return DataLoss(where + " lies outside the data section [" + std::to_string(data_begin) + ", " +
                    std::to_string(data_end) + ")");
  }
  if (ref.offset % kEngineBlobAlignment != 0) {
    return DataLoss(where + " does not start on a " + std::to_string(kEngineBlobAlignment) + "-byte boundary");
  }
  return Status::Ok();
}

}  // namespace

json BlobRef::ToJson() const { return {{"offset", offset}, {"bytes", bytes}, {"crc32c", crc32c}}; }

Result<BlobRef> BlobRef::FromJson(const json& j) { return ReadBlobRef(j, "blob"); }

json CalibrationInfo::ToJson() const {
  return {{"path", path},     {"documents", documents}, {"tokens", tokens},
          {"alpha", alpha},   {"layers", layers},       {"synthetic_token_ids", synthetic_token_ids}};
}

json EngineManifest::ToJson() const {
  json m = json::object();
  m["format_version"] = format_version;
  m["fingerprint"] = fingerprint.ToJson();
  m["model"] = {{"family", FamilyName(model.family)},
                {"model_type", model.model_type},
                {"eos_token_ids", model.eos_token_ids},
                {"bos_token_ids", model.bos_token_ids}};
  m["files"] = files;
  json binary = json::object();
  for (const auto& [name, ref] : binary_files) binary[name] = ref.ToJson();
  m["binary_files"] = binary;
  json b = {{"precision", std::string(PrecisionName(build.precision))},
            {"device", build.device.ToString()},
            {"weight_format", build.weight_format},
            {"max_seq_len", build.max_seq_len},
            {"max_batch_tokens", build.max_batch_tokens},
            {"source", build.source}};
  if (build.activations) b["activations"] = std::string(DTypeName(*build.activations));
  if (build.calibration) b["calibration"] = build.calibration->ToJson();
  if (build.fp8_accumulation) b["fp8_accumulation"] = *build.fp8_accumulation;
  m["build"] = b;
  if (!tuned.is_null()) m["tuned"] = tuned;
  json t = json::object();
  for (const auto& [key, tensor] : tensors) t[key] = TensorToJson(tensor);
  m["tensors"] = t;
  json l = json::object();
  for (const auto& [key, linear] : linears) {
    json blobs = json::array();
    for (const StoredTensor& blob : linear.blobs) blobs.push_back(TensorToJson(blob));
    l[key] = {{"layout", linear.layout}, {"blobs", blobs}};
    if (linear.small_m_max) l[key]["small_m_max"] = *linear.small_m_max;
  }
  m["linears"] = l;
  json index = json::array();
  for (const NamedBlob& b : blobs_index) index.push_back({{"name", b.name}, {"blob", b.blob.ToJson()}});
  m["blobs_index"] = index;
  return m;
}

Result<EngineManifest> EngineManifest::FromJson(const json& j) {
  FERRY_ASSIGN_OR_RETURN(const JsonReader r, JsonReader::Open(j, kWhat, ""));
  EngineManifest m;
  FERRY_RETURN_IF_ERROR(r.Integer("format_version", m.format_version, true));
  if (m.format_version == 0 || m.format_version > kEngineFormatVersion) {
    return DataLoss(std::string(kWhat) + " has format version " + std::to_string(m.format_version) +
                    "; this ferry reads versions 1 to " + std::to_string(kEngineFormatVersion));
  }
  FERRY_ASSIGN_OR_RETURN(const JsonReader fingerprint, r.Object("fingerprint"));
  auto fp = EngineFingerprint::FromJson(fingerprint.value());
  if (!fp.ok()) return fp.status().WithContext(kWhat);
  m.fingerprint = std::move(fp).value();
  FERRY_ASSIGN_OR_RETURN(m.model, ReadModel(r));

  FERRY_ASSIGN_OR_RETURN(const JsonReader files, r.Object("files"));
  for (const auto& [name, text] : files.value().items()) {
    if (!text.is_string()) return DataLoss(std::string(kWhat) + ": " + files.EntryPath(name) + " must be text");
    m.files[name] = text.get<std::string>();
  }
  if (m.files.count("config.json") == 0) return DataLoss(std::string(kWhat) + " has no embedded config.json");
  FERRY_ASSIGN_OR_RETURN(const JsonReader binary, r.Object("binary_files"));
  for (const auto& [name, ref] : binary.value().items()) {
    FERRY_ASSIGN_OR_RETURN(m.binary_files[name], ReadBlobRef(ref, binary.EntryPath(name)));
  }
  FERRY_ASSIGN_OR_RETURN(m.build, ReadBuild(r));
  if (r.Find("tuned") != nullptr) {
    FERRY_ASSIGN_OR_RETURN(const JsonReader tuned, r.Object("tuned"));
    m.tuned = tuned.value();
  }
  FERRY_ASSIGN_OR_RETURN(const JsonReader tensors, r.Object("tensors"));
  for (const auto& [key, t] : tensors.value().items()) {
    FERRY_ASSIGN_OR_RETURN(m.tensors[key], ReadTensor(t, tensors.EntryPath(key)));
  }
  FERRY_ASSIGN_OR_RETURN(const JsonReader linears, r.Object("linears"));
  for (const auto& [key, l] : linears.value().items()) {
    FERRY_ASSIGN_OR_RETURN(m.linears[key], ReadLinear(l, linears.EntryPath(key)));
  }
  FERRY_ASSIGN_OR_RETURN(const json* index, r.Array("blobs_index"));
  for (size_t i = 0; i < index->size(); ++i) {
    FERRY_ASSIGN_OR_RETURN(const JsonReader entry,
                           JsonReader::Open((*index)[i], kWhat, "blobs_index[" + std::to_string(i) + "]"));
    NamedBlob b;
    FERRY_RETURN_IF_ERROR(entry.String("name", b.name, true));
    FERRY_RETURN_IF_ERROR(entry.Require("blob"));
    FERRY_ASSIGN_OR_RETURN(b.blob, ReadBlobRef(*entry.Find("blob"), entry.FieldPath("blob")));
    m.blobs_index.push_back(std::move(b));
  }
  return m;
}

Result<EngineManifest> EngineManifest::Parse(std::string_view text) {
  auto j = ParseUntrustedJson(text);
  if (!j.ok()) return DataLoss(std::string(kWhat) + " is not valid JSON (" + j.status().message() + ")");
  return FromJson(*j);
}

std::vector<NamedBlob> EngineManifest::AllBlobs() const {
  std::vector<NamedBlob> all;
  std::set<std::tuple<uint64_t, uint64_t, uint32_t>> seen;
  auto add = [&](const std::string& name, const BlobRef& ref) {
    if (seen.emplace(ref.offset, ref.bytes, ref.crc32c).second) all.push_back({name, ref});
  };
  for (const auto& [key, t] : tensors) add(key, t.blob);
  for (const auto& [key, l] : linears) {
    for (size_t i = 0; i < l.blobs.size(); ++i) add(key + "#" + std::to_string(i), l.blobs[i].blob);
  }
  for (const auto& [name, ref] : binary_files) add("file:" + name, ref);
  for (const NamedBlob& b : blobs_index) add(b.name, b.blob);
  return all;
}

Status EngineManifest::CheckExtents(uint64_t data_begin, uint64_t data_end) const {
  for (const NamedBlob& b : AllBlobs()) FERRY_RETURN_IF_ERROR(CheckExtent(b, data_begin, data_end));
  return Status::Ok();
}

}  // namespace ferry::io
