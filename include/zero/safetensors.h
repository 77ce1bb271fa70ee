// safetensors files (Hugging Face's tensor format): a streaming writer and a validating reader.
//
// A file is an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON
//   {"wte.weight": {"dtype": "F32", "shape": [97, 32], "data_offsets": [0, 12416]}, ...,
//    "__metadata__": {"format": "pt"}}
// padded with spaces to a multiple of 8, then the byte buffer. Offsets are relative to the
// start of the buffer; each tensor is row-major and little-endian; the tensors do not overlap
// and together cover the buffer exactly.
//
// Dtypes: BOOL U8 I8 I16 U16 I32 U32 I64 U64 F16 BF16 F32 F64 F8_E5M2 F8_E4M3 (the latter two
// are torch's float8_e5m2 and float8_e4m3fn).
#pragma once

#include "zero/export.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zero {

/// One tensor of a file, declared before any data is written.
struct ZERO_API SafetensorsEntry {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;  // {} for a 0-d tensor
};

/// Writes one safetensors file a tensor at a time, so a whole model never needs to be in
/// memory at once. The header holds every tensor's byte range, so all entries are declared
/// up front; their data lies in the buffer in the order of `entries`, and write() may then
/// deliver the values in any order (each is written at its own offset).
///
/// The file appears at `path` only on finish(): until then the bytes go to `path + ".tmp"`,
/// which the destructor removes when finish() was never reached. Not thread-safe.
class ZERO_API SafetensorsWriter {
 public:
  /// Validates the entries (unique non-empty names, none "__metadata__", known dtypes,
  /// non-negative dims), creates `path + ".tmp"` (truncating it) and writes the header.
  SafetensorsWriter(std::string path, std::vector<SafetensorsEntry> entries,
                    std::map<std::string, std::string> metadata = {});
  /// Without finish(): closes and removes the temporary file. Never throws.
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  /// Writes the value of the entry `name`: it must have the entry's dtype and shape (any
  /// device and strides; a non-contiguous or device tensor is copied to a contiguous CPU one
  /// first). Each entry exactly once. Blocks until the bytes are handed to the OS.
  void write(const std::string& name, const at::Tensor& value);

  /// After every entry was written: flushes the file to disk and renames it to `path`
  /// (atomic on POSIX file systems). An error names the entries never written.
  void finish();

  const std::string& path() const;
  /// Bytes of the finished file: 8 + header + data.
  int64_t file_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Convenience: the whole file in one call, tensors in the given order.
ZERO_API void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

struct ZERO_API SafetensorsFile {
  std::map<std::string, at::Tensor> tensors;  // contiguous CPU tensors, owned
  std::map<std::string, std::string> metadata;  // "__metadata__"; empty when absent
};

/// A safetensors file opened for reading a tensor at a time (a model need not fit in memory
/// whole). Opening validates the header: its length against the file size, well-formed JSON,
/// known dtypes, offsets within the buffer, shape × item size equal to the byte length, and
/// tensors covering the buffer without overlaps or gaps. Any violation throws zero::Error
/// naming the file, the tensor and what is wrong.
class ZERO_API SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  SafetensorsReader(SafetensorsReader&&) noexcept;
  ~SafetensorsReader();

  const std::string& path() const;
  /// Every tensor's name, dtype and shape, in the order of their data in the file.
  std::vector<SafetensorsEntry> entries() const;
  const std::map<std::string, std::string>& metadata() const;
  /// The tensor `name`, read from the file now (a contiguous CPU tensor, owned).
  at::Tensor read(const std::string& name) const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

/// Reads and validates a whole file (SafetensorsReader's checks), every tensor in memory.
ZERO_API SafetensorsFile read_safetensors(const std::string& path);

/// The format's name for a dtype ("F32", "BF16", ...); throws zero::Error for a dtype the
/// format cannot hold.
ZERO_API std::string safetensors_dtype_name(at::ScalarType dtype);

}  // namespace zero
