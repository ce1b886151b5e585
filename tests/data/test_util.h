// Helpers shared by the data module's tests.
#pragma once

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

// A test that needs an optional resource (../shared/data, h5py, Pillow, libpng) skips
// where it is missing, but fails where COLONNADE_NO_SKIP=1 (.ci/run sets it: CI installs
// every package and has ../shared/data, so a skip there would hide a broken install).
#define SKIP_OR_FAIL_WITHOUT(what)                                                       \
  do {                                                                                   \
    const char* no_skip = getenv("COLONNADE_NO_SKIP");                                   \
    if (no_skip && std::string(no_skip) == "1") {                                        \
      FAIL() << "missing " << what << " (COLONNADE_NO_SKIP=1: nothing may be skipped)";  \
    }                                                                                    \
    GTEST_SKIP() << "missing " << what;                                                  \
  } while (0)

namespace colonnade::data::testing {

// A fresh directory under $TMPDIR, removed (recursively) at scope exit.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string tmpl = std::string(base ? base : "/tmp") + "/colonnade_data_test_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    char* p = mkdtemp(buf.data());
    path_ = p ? p : "";
  }
  ~TempDir() {
    if (!path_.empty()) RemoveAll(path_);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

  static void RemoveAll(const std::string& p) {
    struct stat st;
    if (lstat(p.c_str(), &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
      if (DIR* d = opendir(p.c_str())) {
        while (dirent* e = readdir(d)) {
          std::string n = e->d_name;
          if (n != "." && n != "..") RemoveAll(p + "/" + n);
        }
        closedir(d);
      }
      rmdir(p.c_str());
    } else {
      unlink(p.c_str());
    }
  }

 private:
  std::string path_;
};

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void WriteFileBytes(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
}

inline bool PathExists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

inline void MakeDir(const std::string& p) { mkdir(p.c_str(), 0755); }

// Runs a shell command; returns its exit status and captures stdout+stderr.
inline int RunCommand(const std::string& cmd, std::string* output) {
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  std::string out;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int status = pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A 2x2 RGB PNG: red, green / blue, gray(128).
inline constexpr unsigned char kTinyPng[] = {
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44,
    0x52, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x02, 0x08, 0x02, 0x00, 0x00, 0x00, 0xFD,
    0xD4, 0x9A, 0x73, 0x00, 0x00, 0x00, 0x13, 0x49, 0x44, 0x41, 0x54, 0x78, 0xDA, 0x63, 0xF8,
    0xCF, 0xC0, 0xC0, 0x00, 0xC2, 0x0C, 0xFF, 0x1B, 0x1A, 0x1A, 0x00, 0x1C, 0xF4, 0x04, 0x7E,
    0x9D, 0x71, 0x8C, 0x3D, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60,
    0x82};

inline std::string MakeShardsBinary() { return COLONNADE_MAKE_SHARDS; }

// The shared real-data folder: $COLONNADE_SHARED_DATA, else <project root>/../shared/data.
inline std::string SharedDataDir() {
  const char* env = getenv("COLONNADE_SHARED_DATA");
  if (env && *env) return env;
  return std::string(COLONNADE_SOURCE_DIR) + "/../shared/data";
}

}  // namespace colonnade::data::testing
