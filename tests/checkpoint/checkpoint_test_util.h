// Helpers shared by the checkpoint tests: temporary directories, hand-made entries with
// awkward values, bitwise comparison, and byte-level corruption of files.
#pragma once

#include <hdf5.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cfloat>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "gtest/gtest.h"

namespace colonnade::checkpoint::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its files at destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/colonnade-ckpt-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    char* p = mkdtemp(buf.data());
    EXPECT_NE(p, nullptr);
    path_ = p ? p : "";
  }
  ~TempDir() {
    if (!path_.empty()) std::system(("rm -rf '" + path_ + "'").c_str());
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::vector<float> RandomValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  // Values a lossy path would change: signed zero, subnormals, extremes.
  const float special[] = {-0.0f, 1e-40f, -1e-45f, FLT_MAX, -FLT_MAX, FLT_MIN, 1.0f / 3.0f};
  for (size_t i = 0; i < sizeof(special) / sizeof(special[0]) && i < n; ++i)
    v[i * 7 % n] = special[i];
  return v;
}

// A small model's worth of entries: conv with bias, batch norm (two non-learnable
// statistics), fully connected.
inline std::vector<TensorEntry> SmallEntries(uint32_t seed, bool velocity = true) {
  struct Spec {
    const char* name;
    std::vector<int64_t> shape;
    bool learnable;
  };
  const Spec specs[] = {
      {"conv1/weight", {4, 3, 3, 3}, true},
      {"conv1/bias", {4}, true},
      {"bn1/gamma", {4}, true},
      {"bn1/beta", {4}, true},
      {"bn1/running_mean", {4}, false},
      {"bn1/running_var", {4}, false},
      {"fc/weight", {5, 36}, true},
      {"fc/bias", {5}, true},
  };
  std::vector<TensorEntry> out;
  uint32_t k = seed;
  for (const Spec& s : specs) {
    TensorEntry e;
    e.name = s.name;
    e.shape = s.shape;
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    e.value = RandomValues(n, ++k);
    if (velocity && s.learnable) e.velocity = RandomValues(n, k + 1000);
    e.learnable = s.learnable;
    out.push_back(std::move(e));
  }
  return out;
}

inline TrainState SmallState(int64_t step) {
  TrainState s;
  s.step = step;
  s.epoch = step / 10;
  s.cursor_epoch = step / 10;
  s.cursor_position = (step % 10) * 128;
  s.seed = 0xFEDCBA9876543210ull;  // above INT64_MAX: must survive as unsigned
  s.model = "tiny";
  s.columns = 2;
  s.input_size = 6;
  s.num_classes = 5;
  s.input_channels = 3;
  s.flags = "--model=tiny\n--lr=0.01\n--data=synthetic\n";
  return s;
}

inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void FlipByte(const std::string& path, int64_t offset) {
  std::string b = ReadBytes(path);
  ASSERT_LT(offset, static_cast<int64_t>(b.size()));
  b[offset] = static_cast<char>(b[offset] ^ 0x5A);
  WriteBytes(path, b);
}

// File offset and size of the first chunk of dataset `name` ("/params/fc/weight").
inline void FirstChunk(const std::string& path, const std::string& name, int64_t* addr,
                       int64_t* size) {
  *addr = *size = -1;
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  ASSERT_GE(d, 0);
  hid_t sp = H5Dget_space(d);
  std::vector<hsize_t> origin(H5Sget_simple_extent_ndims(sp), 0);
  unsigned mask = 0;
  haddr_t a = 0;
  hsize_t n = 0;
  EXPECT_GE(H5Dget_chunk_info_by_coord(d, origin.data(), &mask, &a, &n), 0);
  *addr = static_cast<int64_t>(a);
  *size = static_cast<int64_t>(n);
  H5Sclose(sp);
  H5Dclose(d);
  H5Fclose(f);
}

}  // namespace colonnade::checkpoint::testing
