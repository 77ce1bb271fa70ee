// Helper of check_python_interop.py: `write PATH` writes the reference tensors with
// zero::write_safetensors; `check PATH` reads PATH with zero::read_safetensors and exits 0
// when it holds exactly the reference tensors (names, dtypes, shapes, bits), else 1.
// The reference tensors are defined identically in check_python_interop.py.
#include <ATen/ATen.h>

#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "zero/safetensors.h"

namespace {

// Element i of a float tensor is (i - 2) * 0.5, of an integer one i * 7 - 3, of a bool one
// i % 2 == 0, in row-major order.
at::Tensor reference(at::ScalarType dtype, std::vector<int64_t> shape) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const at::Tensor i = at::arange(numel, at::kDouble);
  at::Tensor value;
  if (dtype == at::kBool) {
    value = at::fmod(i, 2).eq(0);
  } else if (at::isFloatingType(dtype)) {
    value = ((i - 2) * 0.5).to(dtype);
  } else {
    value = (i.to(at::kLong) * 7 - 3).to(dtype);
  }
  return value.reshape(shape);
}

std::vector<std::pair<std::string, at::Tensor>> reference_tensors() {
  return {
      {"f32", reference(at::kFloat, {2, 3})},         {"bf16", reference(at::kBFloat16, {4})},
      {"f16", reference(at::kHalf, {2, 2})},          {"f64", reference(at::kDouble, {})},
      {"i64", reference(at::kLong, {3})},             {"i32", reference(at::kInt, {2, 0})},
      {"u8", reference(at::kByte, {0})},              {"i8", reference(at::kChar, {2})},
      {"bool", reference(at::kBool, {3})},            {"h.0.attn.c_attn.weight", reference(at::kFloat, {3, 5})},
  };
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: safetensors_interop write|check PATH\n";
    return 2;
  }
  const std::string mode = argv[1];
  const std::string path = argv[2];
  try {
    if (mode == "write") {
      zero::write_safetensors(path, reference_tensors(), {{"format", "pt"}, {"producer", "zero"}});
      return 0;
    }
    const zero::SafetensorsFile file = zero::read_safetensors(path);
    const auto expected = reference_tensors();
    bool ok = file.tensors.size() == expected.size();
    if (!ok) std::cerr << path << ": " << file.tensors.size() << " tensors, expected " << expected.size() << "\n";
    for (const auto& [name, value] : expected) {
      const auto found = file.tensors.find(name);
      if (found == file.tensors.end()) {
        std::cerr << path << ": no tensor '" << name << "'\n";
        ok = false;
        continue;
      }
      const at::Tensor& got = found->second;
      if (got.scalar_type() != value.scalar_type() || got.sizes() != value.sizes() ||
          (value.nbytes() > 0 && std::memcmp(got.data_ptr(), value.data_ptr(), value.nbytes()) != 0)) {
        std::cerr << path << ": tensor '" << name << "' is " << got.scalar_type() << got.sizes()
                  << ", expected " << value.scalar_type() << value.sizes() << " (or values differ)\n";
        ok = false;
      }
    }
    if (file.metadata.count("format") == 0 || file.metadata.at("format") != "pt") {
      std::cerr << path << ": metadata has no format = pt\n";
      ok = false;
    }
    if (ok) std::cout << path << ": " << expected.size() << " tensors match\n";
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
