// Tensor: a dense array of float32 (or bf16, below) on one device, a handle to shared storage.
// Copying a Tensor (and Reshaped, Channels, View) gives another handle to the same storage, kept
// alive while any handle exists; writes through one are seen through all. Deep copies are
// explicit: To() and CopyFrom(). GradientSync relies on this: it points each Param::grad
// at a view into its bucket, so the layers' gradient writes land in the bucket.
//
// Activations are CHWN (channels x height x width x batch, batch innermost), the layout
// of cuda-convnet: consecutive threads of a warp read consecutive images at one pixel, so
// their loads coalesce. A fully connected activation is the same tensor with H = W = 1,
// i.e. a (features x N) row-major matrix. Parameters use other shapes (see layers.h).
//
// Storage type (DType): float32, or bf16 for activations and their gradients in the
// bf16-storage mode (docs/PRECISION.md: Net decides per blob). A bf16 tensor has the same
// shape and CHWN layout, 2 bytes per element; data() refuses it (no code reads bf16 bits
// as floats by accident) and raw() gives the bytes to kernels that take either type.
// The host copies convert: ToHost() returns floats, CopyFromHost() rounds to nearest even.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace colonnade {

enum class Device { kCPU = 0, kCUDA = 1 };
const char* DeviceName(Device d);

enum class DType { kFloat32 = 0, kBF16 = 1 };
const char* DTypeName(DType t);  // "float32", "bf16"
inline int64_t DTypeBytes(DType t) { return t == DType::kBF16 ? 2 : 4; }
// bf16 <-> float on the host: bf16 is the upper half of a float32; rounding to nearest
// even, NaN kept a (quiet) NaN, as the device's conversion (cuda/tc_port.h) does.
uint16_t FloatToBf16Bits(float f);
float Bf16BitsToFloat(uint16_t b);

// Dimensions, outermost first. Activations use {C, H, W, N}.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
  static Shape CHWN(int64_t c, int64_t h, int64_t w, int64_t n) { return Shape{c, h, w, n}; }

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  int64_t elements() const;
  const std::vector<int64_t>& dims() const { return dims_; }
  // CHWN accessors; valid for rank-4 activation shapes.
  int64_t c() const { return dims_[0]; }
  int64_t h() const { return dims_[1]; }
  int64_t w() const { return dims_[2]; }
  int64_t n() const { return dims_[3]; }
  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }
  std::string ToString() const;  // e.g. "96x55x55x128"

 private:
  std::vector<int64_t> dims_;
};

class Tensor {
 public:
  Tensor() = default;
  // Allocates (uninitialised) storage for `shape` on `device` through that device's
  // backend allocator (the CUDA backend caches blocks, so this is cheap in steady state).
  explicit Tensor(Shape shape, Device device = Device::kCPU, DType dtype = DType::kFloat32);
  // A host tensor in page-locked memory of `for_device`'s backend, for batches that are
  // copied to that device every step; ordinary host memory when it has none to give.
  static Tensor PinnedHost(Shape shape, Device for_device);

  const Shape& shape() const { return shape_; }
  int64_t size() const { return shape_.elements(); }
  size_t bytes() const { return static_cast<size_t>(size() * DTypeBytes(dtype_)); }
  Device device() const { return device_; }
  DType dtype() const { return dtype_; }
  bool is_bf16() const { return dtype_ == DType::kBF16; }
  bool empty() const { return buffer_ == nullptr; }
  int64_t c() const { return shape_.c(); }
  int64_t h() const { return shape_.h(); }
  int64_t w() const { return shape_.w(); }
  int64_t n() const { return shape_.n(); }

  // The elements of a float32 tensor (a bf16 tensor is refused: see raw()).
  float* data() {
    if (dtype_ != DType::kFloat32) RefuseFloatAccess();
    return reinterpret_cast<float*>(data_);
  }
  const float* data() const {
    if (dtype_ != DType::kFloat32) RefuseFloatAccess();
    return reinterpret_cast<const float*>(data_);
  }
  // The storage of either type (kernels that dispatch on dtype()).
  void* raw() { return data_; }
  const void* raw() const { return data_; }

  // Same storage, another shape with the same number of elements.
  Tensor Reshaped(Shape shape) const;
  // A view of channels [c0, c0 + count) of a CHWN tensor: contiguous because C is
  // outermost. Shares storage.
  Tensor Channels(int64_t c0, int64_t count) const;
  // A tensor of `shape` over elements [element_offset, element_offset + shape's elements)
  // of this tensor's storage (which must hold them): Net places its blobs in one arena
  // this way (core/memory_plan.h). Shares storage.
  Tensor View(Shape shape, int64_t element_offset) const;
  // The same with a storage type of its own: element_offset counts this tensor's elements,
  // and the view's bytes must fit in the rest of the storage (a bf16 blob in the float arena).
  Tensor View(Shape shape, int64_t element_offset, DType dtype) const;

  // Copies to/from host memory regardless of the tensor's device (converting a bf16 tensor).
  std::vector<float> ToHost() const;
  void CopyFromHost(const float* src, int64_t count);
  void CopyFromHost(const std::vector<float>& src) {
    CopyFromHost(src.data(), (int64_t)src.size());
  }
  // Deep copy onto `device`.
  Tensor To(Device device) const;
  // Copies the contents of `src` (same element count and dtype, any device) into this tensor.
  void CopyFrom(const Tensor& src);
  // The same, but a copy between the host and a device is only enqueued behind the
  // device's queued work (Backend::CopyFromHostAsync, CopyToHostAsync): host -> device,
  // `src` must outlive that work; device -> host, this tensor holds the data once a fence
  // recorded after the copy has passed (Backend::RecordFence). Asynchronous only with
  // page-locked host tensors (PinnedHost). Device -> device copies are enqueued as always.
  void CopyFromAsync(const Tensor& src);
  // Every element = value (a bf16 tensor: value rounded to bf16).
  void Fill(float value);

 private:
  [[noreturn]] void RefuseFloatAccess() const;
  Shape shape_;
  Device device_ = Device::kCPU;
  DType dtype_ = DType::kFloat32;
  std::shared_ptr<void> buffer_;  // the allocation, shared by copies and views
  char* data_ = nullptr;
};

}  // namespace colonnade
