#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/json_limits.h"

namespace ferry::io {

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// The data section is written and read as raw host bytes; safetensors is little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

constexpr size_t kHeaderLengthBytes = 8;
// The same bound the reference implementation enforces; a larger header is corruption,
// and refusing it early avoids parsing gigabytes of garbage as JSON.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

std::string SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kI8: return "I8";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
  }
  return "?";
}

// Rank of a dtype in the reference implementation's Dtype enum, which is declared in
// increasing alignment order. Its writer lays tensors out by descending rank, then name,
// so every tensor stays aligned to its element size; we copy that order so our files are
// byte-identical to the reference writer's.
int ReferenceDTypeRank(DType dtype) {
  switch (dtype) {
    case DType::kU8: return 0;
    case DType::kI8: return 1;
    case DType::kF8E4M3: return 2;
    case DType::kF16: return 3;
    case DType::kBF16: return 4;
    case DType::kI32: return 5;
    case DType::kF32: return 6;
    case DType::kI64: return 7;
  }
  return -1;
}

// The names the safetensors format defines; ParseDType also accepts ferry's lower-case
// names, which must not pass as valid in a file.
Result<DType> ParseSafetensorsDType(const std::string& name) {
  static const char* const kNames[] = {"F32", "F16", "BF16", "F8_E4M3", "I8", "U8", "I32", "I64"};
  for (const char* known : kNames) {
    if (name == known) return ParseDType(name);
  }
  return InvalidArgument("unknown dtype '" + name + "' (supported: F32, F16, BF16, F8_E4M3, I8, U8, I32, I64)");
}

// Reads a JSON number as a non-negative integer that fits in int64_t.
bool ReadNonNegative(const json& value, uint64_t* out) {
  if (!value.is_number_unsigned()) return false;
  const uint64_t v = value.get<uint64_t>();
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  *out = v;
  return true;
}

struct ParsedEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // relative to the data section
  uint64_t end = 0;
};

// Validates one tensor entry of the header against a data section of `data_bytes` bytes.
Status ParseEntry(const std::string& name, const json& info, uint64_t data_bytes, ParsedEntry* out) {
  const std::string what = "tensor '" + name + "'";
  if (!info.is_object()) return DataLoss(what + ": header entry is not a JSON object");

  const auto dtype_it = info.find("dtype");
  if (dtype_it == info.end() || !dtype_it->is_string()) return DataLoss(what + ": missing or non-string 'dtype'");
  Result<DType> dtype = ParseSafetensorsDType(dtype_it->get<std::string>());
  if (!dtype.ok()) return DataLoss(what + ": " + dtype.status().message());

  const auto shape_it = info.find("shape");
  if (shape_it == info.end() || !shape_it->is_array()) return DataLoss(what + ": missing or non-array 'shape'");
  Shape shape;
  uint64_t numel = 1;
  bool numel_overflow = false;
  for (const json& dim : *shape_it) {
    uint64_t d = 0;
    if (!ReadNonNegative(dim, &d)) {
      return DataLoss(what + ": dimension " + JsonSnippet(dim) + " in shape " + JsonSnippet(*shape_it) +
                      " is not a non-negative integer");
    }
    shape.push_back(static_cast<int64_t>(d));
    numel_overflow |= __builtin_mul_overflow(numel, d, &numel);
  }
  uint64_t nbytes = 0;
  if (numel_overflow || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(numel, static_cast<uint64_t>(DTypeSize(*dtype)), &nbytes)) {
    return DataLoss(what + ": shape " + JsonSnippet(*shape_it) + " overflows");
  }

  const auto offsets_it = info.find("data_offsets");
  if (offsets_it == info.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    return DataLoss(what + ": missing 'data_offsets' or not a [begin, end] pair");
  }
  uint64_t begin = 0, end = 0;
  if (!ReadNonNegative((*offsets_it)[0], &begin) || !ReadNonNegative((*offsets_it)[1], &end)) {
    return DataLoss(what + ": data_offsets " + JsonSnippet(*offsets_it) + " are not non-negative integers");
  }
  const std::string offsets = "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
  if (begin > end) return DataLoss(what + ": " + offsets + " are out of order");
  if (end > data_bytes) {
    return DataLoss(what + ": " + offsets + " run past the end of the data section (" + std::to_string(data_bytes) +
                    " bytes; file truncated?)");
  }
  if (end - begin != nbytes) {
    return DataLoss(what + ": " + offsets + " hold " + std::to_string(end - begin) + " bytes, but " +
                    SafetensorsDTypeName(*dtype) + " " + ShapeToString(shape) + " needs " + std::to_string(nbytes));
  }
  *out = ParsedEntry{name, *dtype, std::move(shape), begin, end};
  return Status::Ok();
}

// The reference reader also rejects gaps between tensors and trailing bytes; we accept
// them, since neither can make a view read the wrong bytes.
Status CheckNoOverlap(std::vector<ParsedEntry>& entries) {
  std::sort(entries.begin(), entries.end(), [](const ParsedEntry& a, const ParsedEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const ParsedEntry* previous = nullptr;
  for (const ParsedEntry& e : entries) {
    if (e.begin == e.end) continue;  // an empty tensor occupies no bytes
    if (previous != nullptr && e.begin < previous->end) {
      return DataLoss("tensors '" + previous->name + "' [" + std::to_string(previous->begin) + ", " +
                      std::to_string(previous->end) + ") and '" + e.name + "' [" + std::to_string(e.begin) + ", " +
                      std::to_string(e.end) + ") overlap");
    }
    previous = &e;
  }
  return Status::Ok();
}

Status CheckWritable(const std::string& name, const Tensor& t) {
  const std::string what = "tensor '" + name + "'";
  if (name == "__metadata__") return InvalidArgument("'__metadata__' is reserved and cannot name a tensor");
  if (!t.defined()) return InvalidArgument(what + " is undefined");
  if (!t.device().is_cpu()) return InvalidArgument(what + " is on " + t.device().ToString() + ", expected host memory");
  if (!t.is_contiguous()) return InvalidArgument(what + " is not contiguous");
  for (int64_t d : t.shape()) {
    if (d < 0) return InvalidArgument(what + " has a negative dimension in " + ShapeToString(t.shape()));
  }
  if (t.nbytes() > 0 && t.raw() == nullptr) return InvalidArgument(what + " has no data");
  return Status::Ok();
}

// Closes the FILE on every path; the temporary is removed unless the write committed.
class TempFileWriter {
 public:
  explicit TempFileWriter(std::string final_path)
      : final_path_(std::move(final_path)), temp_path_(final_path_ + ".tmp") {}
  ~TempFileWriter() {
    if (file_ != nullptr) std::fclose(file_);
    if (!committed_) std::remove(temp_path_.c_str());
  }
  TempFileWriter(const TempFileWriter&) = delete;
  TempFileWriter& operator=(const TempFileWriter&) = delete;

  Status Open() {
    file_ = std::fopen(temp_path_.c_str(), "wb");
    if (file_ == nullptr) return InvalidArgument("cannot write '" + temp_path_ + "'");
    return Status::Ok();
  }
  Status Write(const void* data, size_t size) {
    if (size > 0 && std::fwrite(data, 1, size, file_) != size) return DataLoss("error writing '" + temp_path_ + "'");
    return Status::Ok();
  }
  Status Commit() {
    const int rc = std::fclose(file_);
    file_ = nullptr;
    if (rc != 0) return DataLoss("error writing '" + temp_path_ + "'");
    if (std::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
      return Internal("cannot rename '" + temp_path_ + "' to '" + final_path_ + "'");
    }
    committed_ = true;
    return Status::Ok();
  }

 private:
  std::string final_path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

bool IsRegularFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

// Shard names come from a file we did not write; keep them inside the model directory.
bool IsPlainShardName(const std::string& name) {
  if (name.empty() || name.front() == '/') return false;
  for (const auto& part : std::filesystem::path(name)) {
    if (part == "..") return false;
  }
  return true;
}

}  // namespace

Result<std::shared_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  const std::string where = "safetensors file '" + path + "'";
  const size_t file_size = file->size();
  if (file_size < kHeaderLengthBytes) {
    return DataLoss(where + ": " + std::to_string(file_size) + " bytes is too short for the 8-byte header length");
  }
  uint64_t header_bytes = 0;
  for (size_t i = 0; i < kHeaderLengthBytes; ++i) header_bytes |= static_cast<uint64_t>(file->data()[i]) << (8 * i);
  if (header_bytes > kMaxHeaderBytes) {
    return DataLoss(where + ": header length " + std::to_string(header_bytes) + " exceeds the 100 MB limit");
  }
  if (header_bytes > file_size - kHeaderLengthBytes) {
    return DataLoss(where + ": header length " + std::to_string(header_bytes) + " runs past the end of the file (" +
                    std::to_string(file_size) + " bytes)");
  }
  const char* header_begin = reinterpret_cast<const char*>(file->data()) + kHeaderLengthBytes;
  const uint64_t data_start = kHeaderLengthBytes + header_bytes;
  const uint64_t data_bytes = file_size - data_start;

  auto parsed_header = ParseUntrustedJson(std::string_view(header_begin, header_bytes));
  if (!parsed_header.ok()) {
    return DataLoss(where + ": header is not valid JSON (" + parsed_header.status().message() + ")");
  }
  const json& header = *parsed_header;
  if (!header.is_object()) return DataLoss(where + ": header is not a JSON object");

  auto st = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  st->file_ = std::move(file);
  std::vector<ParsedEntry> parsed;
  parsed.reserve(header.size());
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (info.is_null()) continue;
      if (!info.is_object()) return DataLoss(where + ": '__metadata__' is not a JSON object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) return DataLoss(where + ": '__metadata__' value for '" + key + "' is not a string");
        st->metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    ParsedEntry entry;
    Status s = ParseEntry(name, info, data_bytes, &entry);
    if (!s.ok()) return s.WithContext(where);
    parsed.push_back(std::move(entry));
  }
  FERRY_RETURN_IF_ERROR(CheckNoOverlap(parsed).WithContext(where));

  for (ParsedEntry& e : parsed) {
    st->entries_.emplace(e.name, Entry{e.dtype, std::move(e.shape), static_cast<size_t>(data_start + e.begin),
                                       static_cast<size_t>(data_start + e.end)});
  }
  return st;
}

bool SafetensorsFile::Has(const std::string& name) const { return entries_.count(name) > 0; }

std::vector<std::string> SafetensorsFile::Names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

Result<Tensor> SafetensorsFile::Get(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) return NotFound("tensor '" + name + "' not found in '" + path() + "'");
  const Entry& e = it->second;
  // Tensor has no const view; callers are told not to write (the mapping is PROT_READ).
  void* data = const_cast<uint8_t*>(file_->data() + e.begin);
  return Tensor::FromBorrowed(data, e.shape, e.dtype, file_);
}

Result<std::shared_ptr<Checkpoint>> Checkpoint::Open(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  const std::string single = (dir / "model.safetensors").string();
  const std::string index_path = (dir / "model.safetensors.index.json").string();
  auto ckpt = std::shared_ptr<Checkpoint>(new Checkpoint());

  // Transformers also prefers the single file when both are present.
  if (IsRegularFile(single)) {
    FERRY_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single));
    for (const std::string& name : file->Names()) ckpt->index_.emplace(name, 0);
    ckpt->files_.push_back(std::move(file));
    return ckpt;
  }
  if (!IsRegularFile(index_path)) {
    return NotFound("no model.safetensors or model.safetensors.index.json in '" + model_dir + "'");
  }

  FERRY_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
  const std::string where = "checkpoint index '" + index_path + "'";
  auto parsed_index = ParseUntrustedJson(text);
  if (!parsed_index.ok()) return DataLoss(where + ": not valid JSON (" + parsed_index.status().message() + ")");
  const json& index = *parsed_index;
  if (!index.is_object()) return DataLoss(where + ": not a JSON object");
  const auto map_it = index.find("weight_map");
  if (map_it == index.end() || !map_it->is_object()) return DataLoss(where + ": missing 'weight_map' object");
  if (map_it->empty()) return DataLoss(where + ": 'weight_map' is empty");

  std::map<std::string, size_t> shard_index;  // shard file name -> files_ index
  for (const auto& [name, shard] : map_it->items()) {
    if (!shard.is_string()) return DataLoss(where + ": shard of tensor '" + name + "' is not a string");
    const std::string shard_name = shard.get<std::string>();
    if (!IsPlainShardName(shard_name)) {
      return DataLoss(where + ": shard '" + shard_name + "' of tensor '" + name + "' is outside the model directory");
    }
    auto [it, inserted] = shard_index.emplace(shard_name, ckpt->files_.size());
    if (inserted) {
      Result<std::shared_ptr<SafetensorsFile>> file = SafetensorsFile::Open((dir / shard_name).string());
      if (!file.ok()) return file.status().WithContext(where + ": shard '" + shard_name + "'");
      ckpt->files_.push_back(std::move(file).value());
    }
    if (!ckpt->files_[it->second]->Has(name)) {
      return DataLoss(where + ": tensor '" + name + "' is mapped to shard '" + shard_name +
                      "', which does not contain it");
    }
    ckpt->index_.emplace(name, it->second);
  }
  return ckpt;
}

bool Checkpoint::Has(const std::string& name) const { return index_.count(name) > 0; }

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, file] : index_) names.push_back(name);
  return names;
}

Result<Tensor> Checkpoint::Get(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) return NotFound("tensor '" + name + "' not found in the checkpoint");
  return files_[it->second]->Get(name);
}

Result<Tensor> Checkpoint::GetChecked(const std::string& name, const Shape& shape) const {
  FERRY_ASSIGN_OR_RETURN(Tensor t, Get(name));
  if (t.shape() != shape) {
    return InvalidArgument("tensor '" + name + "': expected shape " + ShapeToString(shape) + ", got " +
                           ShapeToString(t.shape()));
  }
  return t;
}

Status WriteSafetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<const std::pair<std::string, Tensor>*> order;
  order.reserve(tensors.size());
  std::set<std::string_view> seen;
  for (const auto& item : tensors) {
    FERRY_RETURN_IF_ERROR(CheckWritable(item.first, item.second));
    if (!seen.insert(item.first).second) return InvalidArgument("tensor '" + item.first + "' is given twice");
    order.push_back(&item);
  }
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    const int ra = ReferenceDTypeRank(a->second.dtype()), rb = ReferenceDTypeRank(b->second.dtype());
    return ra != rb ? ra > rb : a->first < b->first;
  });

  // ordered_json keeps insertion order, so the header lists tensors in data order with
  // __metadata__ first, exactly as the reference writer does.
  std::string header_text;
  try {
    ordered_json header = ordered_json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    uint64_t offset = 0;
    for (const auto* item : order) {
      const Tensor& t = item->second;
      const uint64_t end = offset + t.nbytes();
      ordered_json info = ordered_json::object();
      info["dtype"] = SafetensorsDTypeName(t.dtype());
      info["shape"] = t.shape();
      info["data_offsets"] = {offset, end};
      header[item->first] = std::move(info);
      offset = end;
    }
    header_text = header.dump();
  } catch (const ordered_json::exception& e) {
    // dump() throws on names or metadata that are not valid UTF-8.
    return InvalidArgument("cannot write '" + path + "': " + e.what());
  }
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  uint8_t length_bytes[kHeaderLengthBytes];
  const uint64_t header_bytes = header_text.size();
  for (size_t i = 0; i < kHeaderLengthBytes; ++i) length_bytes[i] = static_cast<uint8_t>(header_bytes >> (8 * i));

  TempFileWriter out(path);
  FERRY_RETURN_IF_ERROR(out.Open());
  FERRY_RETURN_IF_ERROR(out.Write(length_bytes, sizeof(length_bytes)));
  FERRY_RETURN_IF_ERROR(out.Write(header_text.data(), header_text.size()));
  for (const auto* item : order) FERRY_RETURN_IF_ERROR(out.Write(item->second.raw(), item->second.nbytes()));
  return out.Commit();
}

}  // namespace ferry::io
