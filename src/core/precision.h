// Arithmetic precision of a training run (docs/PRECISION.md): which units compute the
// convolutions and fully connected products. Tensors, master weights, momentum, every
// reduction and the checkpoints stay FP32 in every mode.
//   kFP32  strict FP32 everywhere (the project's reference: results bitwise reproducible)
//   kTF32  convolutions and fully connected products on the tensor cores with TF32 operands
//   kBF16  convolutions on the tensor cores with bf16 operands; fully connected products TF32
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace colonnade {

enum class Precision { kFP32, kTF32, kBF16 };

inline const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFP32:
      return "fp32";
    case Precision::kTF32:
      return "tf32";
    case Precision::kBF16:
      return "bf16";
  }
  return "?";
}

// "fp32", "tf32" or "bf16"; false for anything else.
inline bool ParsePrecision(absl::string_view text, Precision* p) {
  for (Precision q : {Precision::kFP32, Precision::kTF32, Precision::kBF16}) {
    if (text == PrecisionName(q)) {
      *p = q;
      return true;
    }
  }
  return false;
}

}  // namespace colonnade
