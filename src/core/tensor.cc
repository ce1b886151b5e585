#include "core/tensor.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/backend.h"
#include "core/log.h"
#include "core/ops.h"

namespace colonnade {

const char* DeviceName(Device d) { return d == Device::kCPU ? "cpu" : "cuda"; }

const char* DTypeName(DType t) { return t == DType::kBF16 ? "bf16" : "float32"; }

uint16_t FloatToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (overflow rounds to infinity)
  return static_cast<uint16_t>(u >> 16);
}

float Bf16BitsToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

void Tensor::RefuseFloatAccess() const {
  LOG(FATAL) << "Tensor::data() on a " << DTypeName(dtype_) << " tensor of shape "
             << shape_.ToString()
             << ": this code path takes float32 only (use raw() in a kernel that takes "
                "bf16, or keep this blob float32: docs/PRECISION.md)";
  std::abort();
}

int64_t Shape::elements() const {
  if (dims_.empty()) return 0;
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

std::string Shape::ToString() const { return absl::StrJoin(dims_, "x"); }

Tensor::Tensor(Shape shape, Device device, DType dtype)
    : shape_(std::move(shape)), device_(device), dtype_(dtype) {
  Backend* backend = GetBackend(device);
  CHECK(backend != nullptr) << "no backend for device " << DeviceName(device);
  size_t n = bytes();
  void* p = backend->Allocate(n == 0 ? sizeof(float) : n);
  buffer_ = std::shared_ptr<void>(p, [backend](void* q) { backend->Free(q); });
  data_ = static_cast<char*>(p);
}

Tensor Tensor::PinnedHost(Shape shape, Device for_device) {
  Backend* backend = GetBackend(for_device);
  Tensor t;
  t.shape_ = std::move(shape);
  const size_t n = std::max<size_t>(t.bytes(), sizeof(float));
  void* p = backend != nullptr ? backend->AllocateHostPinned(n) : nullptr;
  if (p == nullptr) return Tensor(std::move(t.shape_), Device::kCPU);
  t.buffer_ = std::shared_ptr<void>(p, [backend](void* q) { backend->FreeHostPinned(q); });
  t.data_ = static_cast<char*>(p);
  return t;
}

Tensor Tensor::Reshaped(Shape shape) const {
  CHECK_EQ(shape.elements(), size()) << shape.ToString() << " vs " << shape_.ToString();
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::Channels(int64_t c0, int64_t count) const {
  CHECK_EQ(shape_.rank(), 4);
  CHECK(c0 >= 0 && c0 + count <= c()) << "channel slice out of range";
  Tensor t = *this;
  t.shape_[0] = count;
  t.data_ = data_ + c0 * h() * w() * n() * DTypeBytes(dtype_);
  return t;
}

Tensor Tensor::View(Shape shape, int64_t element_offset) const {
  CHECK(element_offset >= 0 && element_offset + shape.elements() <= size())
      << "view " << shape.ToString() << " at " << element_offset << " outside "
      << shape_.ToString();
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.data_ = data_ + element_offset * DTypeBytes(dtype_);
  return t;
}

Tensor Tensor::View(Shape shape, int64_t element_offset, DType dtype) const {
  const int64_t end = element_offset * DTypeBytes(dtype_) + shape.elements() * DTypeBytes(dtype);
  CHECK(element_offset >= 0 && end <= static_cast<int64_t>(bytes()))
      << DTypeName(dtype) << " view " << shape.ToString() << " at " << element_offset << " outside "
      << DTypeName(dtype_) << " " << shape_.ToString();
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.data_ = data_ + element_offset * DTypeBytes(dtype_);
  return t;
}

std::vector<float> Tensor::ToHost() const {
  std::vector<float> out(size());
  if (size() == 0) return out;
  if (dtype_ == DType::kBF16) {
    std::vector<uint16_t> bits(size());
    if (device_ == Device::kCPU) {
      std::memcpy(bits.data(), data_, bytes());
    } else {
      GetBackend(device_)->CopyToHost(bits.data(), data_, bytes());
    }
    for (int64_t i = 0; i < size(); ++i) out[i] = Bf16BitsToFloat(bits[i]);
    return out;
  }
  if (device_ == Device::kCPU) {
    std::memcpy(out.data(), data_, bytes());
  } else {
    GetBackend(device_)->CopyToHost(out.data(), data_, bytes());
  }
  return out;
}

void Tensor::CopyFromHost(const float* src, int64_t count) {
  CHECK_EQ(count, size()) << "CopyFromHost into " << shape_.ToString();
  if (count == 0) return;
  if (dtype_ == DType::kBF16) {
    std::vector<uint16_t> bits(count);
    for (int64_t i = 0; i < count; ++i) bits[i] = FloatToBf16Bits(src[i]);
    if (device_ == Device::kCPU) {
      std::memcpy(data_, bits.data(), bytes());
    } else {
      GetBackend(device_)->CopyFromHost(data_, bits.data(), bytes());
    }
    return;
  }
  if (device_ == Device::kCPU) {
    std::memcpy(data_, src, bytes());
  } else {
    GetBackend(device_)->CopyFromHost(data_, src, bytes());
  }
}

Tensor Tensor::To(Device device) const {
  Tensor t(shape_, device, dtype_);
  t.CopyFrom(*this);
  return t;
}

void Tensor::CopyFrom(const Tensor& src) {
  CHECK_EQ(src.size(), size()) << src.shape().ToString() << " -> " << shape_.ToString();
  CHECK(src.dtype_ == dtype_) << "CopyFrom " << DTypeName(src.dtype_) << " into "
                              << DTypeName(dtype_) << " (" << shape_.ToString() << ")";
  if (size() == 0) return;
  if (src.device_ == device_) {
    if (device_ == Device::kCPU) {
      std::memcpy(data_, src.data_, bytes());
    } else {
      GetBackend(device_)->CopyDeviceToDevice(data_, src.data_, bytes());
    }
  } else if (src.device_ == Device::kCPU) {
    GetBackend(device_)->CopyFromHost(data_, src.data_, bytes());
  } else if (device_ == Device::kCPU) {
    GetBackend(src.device_)->CopyToHost(data_, src.data_, bytes());
  } else {
    std::vector<float> tmp = src.ToHost();  // exact for bf16 too: widening, then rounding back
    CopyFromHost(tmp);
  }
}

void Tensor::CopyFromAsync(const Tensor& src) {
  CHECK_EQ(src.size(), size()) << src.shape().ToString() << " -> " << shape_.ToString();
  CHECK(src.dtype_ == dtype_) << "CopyFromAsync " << DTypeName(src.dtype_) << " into "
                              << DTypeName(dtype_);
  if (size() == 0) return;
  if (src.device_ == Device::kCPU && device_ != Device::kCPU) {
    GetBackend(device_)->CopyFromHostAsync(data_, src.data_, bytes());
  } else if (src.device_ != Device::kCPU && device_ == Device::kCPU) {
    GetBackend(src.device_)->CopyToHostAsync(data_, src.data_, bytes());
  } else {
    CopyFrom(src);
  }
}

void Tensor::Fill(float value) {
  if (dtype_ == DType::kBF16 && device_ == Device::kCPU) {  // only tests hold these
    std::fill_n(reinterpret_cast<uint16_t*>(data_), size(), FloatToBf16Bits(value));
    return;
  }
  OpsFor(device_).Fill(*this, value);  // a device backend fills either storage type
}

}  // namespace colonnade
