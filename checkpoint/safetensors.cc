#include "checkpoint/safetensors.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/file_io.h"
#include "common/json_writer.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace mtrain {
namespace {

// Bounds a header we are willing to parse (the format's own reference limit is 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100 << 20;

int DtypeSize(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F64" || dtype == "I64") return 8;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16") return 2;
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL") return 1;
  return 0;
}

// The header holds only strings and integers (written exactly, see JsonArray): this format
// is never used, but JsonObject asks for one.
constexpr JsonNumberFormat kUnusedNumberFormat = JsonNumberFormat::Significant(17);

// Compact and minimally escaped: the bytes every safetensors file of this project has had.
JsonObject HeaderObject() {
  return JsonObject(kUnusedNumberFormat, JsonLayout::kCompact, JsonEscaping::kMinimal);
}

template <typename Integer>
std::string IntegerArray(const std::vector<Integer>& values) {
  return JsonArray(values, [](Integer value) { return absl::StrCat(value); });
}

absl::Status Malformed(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(path, ": not a valid safetensors file: ", what));
}

// JSON numbers are doubles: a shape extent or offset must be a whole number in [0, 2^53],
// the range in which a double holds every integer (casting 1e30 to an integer is undefined).
absl::StatusOr<uint64_t> WholeNumber(const std::string& path, const std::string& what,
                                     const google::protobuf::Value& value) {
  constexpr double kMaxExact = 9007199254740992.0;  // 2^53
  const double number = value.number_value();
  if (value.kind_case() != google::protobuf::Value::kNumberValue || !(number >= 0) ||
      number > kMaxExact || number != std::floor(number)) {
    return Malformed(path, absl::StrCat(what, " holds ", value.ShortDebugString(),
                                        "; expected a whole number in [0, 2^53]"));
  }
  return static_cast<uint64_t>(number);
}

std::string ShapeText(const google::protobuf::Value& shape) {
  std::vector<std::string> parts;
  for (const auto& d : shape.list_value().values()) parts.push_back(absl::StrCat(d.number_value()));
  return absl::StrJoin(parts, ", ");
}

}  // namespace

int64_t SafetensorsTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsTensor MakeF32Tensor(std::vector<int64_t> shape, const float* data) {
  SafetensorsTensor tensor{"F32", std::move(shape), "", {}};
  tensor.bytes.assign(reinterpret_cast<const char*>(data), tensor.num_elements() * 4);
  return tensor;
}

SafetensorsTensor MakeI32Tensor(std::vector<int64_t> shape, const int32_t* data) {
  SafetensorsTensor tensor{"I32", std::move(shape), "", {}};
  tensor.bytes.assign(reinterpret_cast<const char*>(data), tensor.num_elements() * 4);
  return tensor;
}

absl::StatusOr<std::vector<float>> TensorAsFloats(const SafetensorsTensor& tensor) {
  const int64_t n = tensor.num_elements();
  std::vector<float> values(n);
  if (tensor.dtype == "F32") {
    std::memcpy(values.data(), tensor.bytes.data(), n * 4);
  } else if (tensor.dtype == "F64") {
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, tensor.bytes.data() + 8 * i, 8);
      values[i] = static_cast<float>(v);
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat("expected F32 or F64, got ", tensor.dtype));
  }
  return values;
}

absl::StatusOr<std::vector<int32_t>> TensorAsInt32(const SafetensorsTensor& tensor) {
  if (tensor.dtype != "I32") {
    return absl::InvalidArgumentError(absl::StrCat("expected I32, got ", tensor.dtype));
  }
  std::vector<int32_t> values(tensor.num_elements());
  std::memcpy(values.data(), tensor.bytes.data(), values.size() * 4);
  return values;
}

absl::Status WriteSafetensors(const std::string& path, const SafetensorsFile& file) {
  JsonObject header_object = HeaderObject();
  if (!file.metadata.empty()) {
    JsonObject metadata = HeaderObject();
    for (const auto& [key, value] : file.metadata) metadata.String(key, value);
    header_object.Raw("__metadata__", metadata.Close());
  }
  uint64_t offset = 0;
  for (const auto& [name, tensor] : file.tensors) {
    const uint64_t end = offset + tensor.bytes.size();
    header_object.Raw(name,
                      HeaderObject()
                          .String("dtype", tensor.dtype)
                          .Raw("shape", IntegerArray(tensor.shape))
                          .Raw("data_offsets", IntegerArray(std::vector<uint64_t>{offset, end}))
                          .Close());
    offset = end;
  }
  std::string header = header_object.Close();
  // Pad with spaces to 8-byte alignment, as the reference writer does.
  while (header.size() % 8 != 0) header += ' ';
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", temporary));
    const uint64_t length = header.size();
    char length_bytes[8];
    for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<char>((length >> (8 * i)) & 0xFF);
    out.write(length_bytes, 8);
    out.write(header.data(), header.size());
    for (const auto& [name, tensor] : file.tensors)
      out.write(tensor.bytes.data(), tensor.bytes.size());
    if (!out) return absl::InternalError(absl::StrCat("write failed: ", temporary));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", temporary, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsReader> SafetensorsReader::Open(const std::string& path) {
  // Everything is checked against the file's size before anything is allocated: the
  // header length, every shape and every data offset. /dev/zero, a FIFO or a directory
  // is refused before a byte is read (reading /dev/zero to its end used to abort the
  // rank with std::bad_alloc; opening a FIFO used to block forever).
  ASSIGN_OR_RETURN(RandomAccessFile file, RandomAccessFile::Open(path));
  ASSIGN_OR_RETURN(const uint64_t file_size, file.Size());
  if (file_size < 8) {
    return Malformed(path, absl::StrCat("the file has ", file_size,
                                        " bytes, shorter than the 8-byte header length"));
  }
  char length_bytes[8];
  RETURN_IF_ERROR(file.Read(0, sizeof(length_bytes), length_bytes));
  uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) {
    header_length |= static_cast<uint64_t>(static_cast<unsigned char>(length_bytes[i])) << (8 * i);
  }
  if (header_length > kMaxHeaderBytes) {
    return Malformed(path, absl::StrCat("header length ", header_length, " exceeds the limit of ",
                                        kMaxHeaderBytes, " bytes"));
  }
  if (header_length > file_size - 8) {
    return Malformed(path, absl::StrCat("header length ", header_length, " exceeds the file (",
                                        file_size, " bytes)"));
  }
  std::string header_json(static_cast<size_t>(header_length), '\0');
  RETURN_IF_ERROR(file.Read(8, header_json.size(), header_json.data()));
  google::protobuf::Struct header;
  const auto parsed = google::protobuf::util::JsonStringToMessage(header_json, &header);
  if (!parsed.ok()) return Malformed(path, absl::StrCat("header JSON: ", parsed.ToString()));
  header_json.clear();
  header_json.shrink_to_fit();
  const uint64_t data_start = 8 + header_length;
  const uint64_t data_size = file_size - data_start;
  SafetensorsReader result(std::move(file), data_start);
  for (const auto& [name, value] : header.fields()) {
    if (value.kind_case() != google::protobuf::Value::kStructValue) {
      return Malformed(path, absl::StrCat("header entry '", name, "' is not a JSON object"));
    }
    if (name == "__metadata__") {
      for (const auto& [key, item] : value.struct_value().fields()) {
        result.metadata_[key] = item.string_value();
      }
      continue;
    }
    const auto& fields = value.struct_value().fields();
    auto dtype = fields.find("dtype");
    auto shape = fields.find("shape");
    auto offsets = fields.find("data_offsets");
    if (dtype == fields.end() || shape == fields.end() || offsets == fields.end() ||
        shape->second.kind_case() != google::protobuf::Value::kListValue ||
        offsets->second.kind_case() != google::protobuf::Value::kListValue ||
        offsets->second.list_value().values_size() != 2) {
      return Malformed(path, absl::StrCat("tensor '", name,
                                          "' lacks dtype, shape (a list) or data_offsets (a list "
                                          "of 2)"));
    }
    SafetensorsEntry tensor;
    tensor.dtype = dtype->second.string_value();
    const int element_size = DtypeSize(tensor.dtype);
    if (element_size == 0) {
      return Malformed(path,
                       absl::StrCat("tensor '", name, "' has unknown dtype '", tensor.dtype, "'"));
    }
    // The element count is bounded by the data bytes as it is multiplied up, so neither
    // it nor the byte count can overflow (a shape of [2^40, 2^40] is refused here).
    uint64_t elements = 1;
    for (const auto& d : shape->second.list_value().values()) {
      ASSIGN_OR_RETURN(const uint64_t extent,
                       WholeNumber(path, absl::StrCat("tensor '", name, "' shape"), d));
      if (extent != 0 && elements > data_size / extent) {
        return Malformed(path, absl::StrCat("tensor '", name, "' shape [", ShapeText(shape->second),
                                            "] holds more elements than "
                                            "the file's ",
                                            data_size, " data bytes"));
      }
      elements *= extent;
      tensor.shape.push_back(static_cast<int64_t>(extent));
    }
    ASSIGN_OR_RETURN(const uint64_t begin,
                     WholeNumber(path, absl::StrCat("tensor '", name, "' data_offsets[0]"),
                                 offsets->second.list_value().values(0)));
    ASSIGN_OR_RETURN(const uint64_t end,
                     WholeNumber(path, absl::StrCat("tensor '", name, "' data_offsets[1]"),
                                 offsets->second.list_value().values(1)));
    if (begin > end || end > data_size) {
      return Malformed(path, absl::StrCat("tensor '", name, "' data [", begin, ", ", end,
                                          ") is outside the ", data_size, " data bytes"));
    }
    if (elements > data_size / element_size || elements * element_size != end - begin) {
      return Malformed(
          path, absl::StrCat("tensor '", name, "' shape [", ShapeText(shape->second), "] of ",
                             tensor.dtype, " does not match its ", end - begin, " bytes"));
    }
    tensor.begin = begin;
    tensor.end = end;
    result.entries_[name] = std::move(tensor);
  }
  return result;
}

absl::StatusOr<SafetensorsTensor> SafetensorsReader::Read(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat(file_.path(), ": no tensor '", name, "'"));
  }
  const SafetensorsEntry& entry = it->second;
  SafetensorsTensor tensor;
  tensor.dtype = entry.dtype;
  tensor.shape = entry.shape;
  // Every entry was checked to lie inside the file at Open.
  tensor.bytes.resize(static_cast<size_t>(entry.end - entry.begin));
  RETURN_IF_ERROR(file_.Read(data_start_ + entry.begin, tensor.bytes.size(), tensor.bytes.data()));
  return tensor;
}

absl::StatusOr<SafetensorsTensor> SafetensorsReader::ReadFloat32(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end() || it->second.dtype != "F32") return Read(name);
  const SafetensorsEntry& entry = it->second;
  const uint64_t bytes = entry.end - entry.begin;
  if (bytes % sizeof(float) != 0) return Read(name);  // the caller names the size mismatch
  SafetensorsTensor tensor;
  tensor.dtype = entry.dtype;
  tensor.shape = entry.shape;
  tensor.f32.resize(static_cast<size_t>(bytes / sizeof(float)));
  // Little-endian F32 is the host's float (the project's targets are little-endian).
  RETURN_IF_ERROR(file_.Read(data_start_ + entry.begin, bytes, tensor.f32.data()));
  return tensor;
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  ASSIGN_OR_RETURN(const SafetensorsReader reader, SafetensorsReader::Open(path));
  SafetensorsFile result;
  result.metadata = reader.metadata();
  for (const auto& [name, entry] : reader.entries()) {
    ASSIGN_OR_RETURN(result.tensors[name], reader.Read(name));
  }
  return result;
}

}  // namespace mtrain
