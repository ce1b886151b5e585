// Helpers shared by the data module's tests.
#pragma once

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

// A test that needs an optional resource (../shared/data, h5py, Pillow, libpng) skips
// where it is missing, but fails where COLONNADE_NO_SKIP=1 (.ci/run sets it: CI installs
// every package and has ../shared/data, so a skip there would hide a broken install).
#define SKIP_OR_FAIL_WITHOUT(what)                                                      \
  do {                                                                                  \
    const char* no_skip = getenv("COLONNADE_NO_SKIP");                                  \
    if (no_skip && std::string(no_skip) == "1") {                                       \
      FAIL() << "missing " << what << " (COLONNADE_NO_SKIP=1: nothing may be skipped)"; \
    }                                                                                   \
    GTEST_SKIP() << "missing " << what;                                                 \
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

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
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

// What a guarded call returned: `completed` with fn's text, or how the child ended.
struct Guarded {
  bool completed = false;
  std::string text;  // fn's result, or "hung: ..." / "died: ..." when !completed
};

// Runs `fn` in a forked child under an address-space limit and a timeout, so code that
// would exhaust memory (a crafted size) or block forever (a FIFO) fails the calling test
// instead of the machine or the suite. The child's HDF5/library state is its own.
inline Guarded RunGuarded(const std::function<std::string()>& fn, int timeout_s = 20,
                          uint64_t max_bytes = uint64_t{2} << 30) {
  std::fflush(nullptr);
  int fds[2];
  if (pipe(fds) != 0) return {false, "died: pipe() failed"};
  const pid_t pid = fork();
  if (pid < 0) return {false, "died: fork() failed"};
  if (pid == 0) {
    close(fds[0]);
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = max_bytes;
    setrlimit(RLIMIT_AS, &rl);
    // Nothing may leave the child but _exit: an escaping exception would make the child
    // carry on running the rest of the test suite.
    std::string out;
    int code = 0;
    try {
      out = fn();
    } catch (const std::exception& e) {
      out = std::string("died: exception: ") + e.what();
      code = 3;
    } catch (...) {
      out = "died: exception";
      code = 3;
    }
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    _exit(code);
  }
  close(fds[1]);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  bool hung = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      hung = true;
      break;
    }
    struct pollfd p = {fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[4096];
    ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (hung) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (hung) return {false, "hung: killed after " + std::to_string(timeout_s) + " s"};
  if (WIFSIGNALED(status)) {
    return {false, std::string("died: signal ") + strsignal(WTERMSIG(status)) + " (" + out + ")"};
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return {false, out.empty() ? "died: exit status " + std::to_string(WEXITSTATUS(status)) : out};
  }
  return {true, out};
}

// Creates a FIFO (named pipe) at `path`: opening it for reading blocks until a writer
// appears, which no one ever will.
inline bool MakeFifo(const std::string& path) { return mkfifo(path.c_str(), 0644) == 0; }

// A 2x2 RGB PNG: red, green / blue, gray(128).
inline constexpr unsigned char kTinyPng[] = {
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x02, 0x08, 0x02, 0x00, 0x00, 0x00, 0xFD, 0xD4, 0x9A,
    0x73, 0x00, 0x00, 0x00, 0x13, 0x49, 0x44, 0x41, 0x54, 0x78, 0xDA, 0x63, 0xF8, 0xCF, 0xC0, 0xC0,
    0x00, 0xC2, 0x0C, 0xFF, 0x1B, 0x1A, 0x1A, 0x00, 0x1C, 0xF4, 0x04, 0x7E, 0x9D, 0x71, 0x8C, 0x3D,
    0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82};

// ---- crafted images ----------------------------------------------------------------------

// `jpeg` with the frame header (SOF0..SOF2) rewritten to claim height x width.
inline std::string JpegClaimingSize(std::string jpeg, int height, int width) {
  for (size_t i = 2; i + 8 < jpeg.size(); ++i) {
    const unsigned char m = static_cast<unsigned char>(jpeg[i + 1]);
    if (static_cast<unsigned char>(jpeg[i]) == 0xFF && m >= 0xC0 && m <= 0xC2) {
      jpeg[i + 5] = static_cast<char>(height >> 8);
      jpeg[i + 6] = static_cast<char>(height & 0xFF);
      jpeg[i + 7] = static_cast<char>(width >> 8);
      jpeg[i + 8] = static_cast<char>(width & 0xFF);
      return jpeg;
    }
  }
  return "";
}

// `jpeg` cut right after its scan header and closed with an end-of-image marker: a
// well-formed file with no image data, which libjpeg decodes to flat gray with only a
// warning ("premature end of data segment").
inline std::string JpegWithoutImageData(const std::string& jpeg) {
  const size_t sos = jpeg.find("\xFF\xDA");
  if (sos == std::string::npos || sos + 4 > jpeg.size()) return "";
  const size_t len =
      (static_cast<unsigned char>(jpeg[sos + 2]) << 8) | static_cast<unsigned char>(jpeg[sos + 3]);
  return jpeg.substr(0, sos + 2 + len) + "\xFF\xD9";
}

inline uint32_t Crc32(const std::string& bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

// A PNG whose header claims height x width RGB pixels, followed by a few bytes of image
// data only: the header alone makes a decoder that trusts it allocate height*width*3.
inline std::string PngClaimingSize(uint32_t height, uint32_t width) {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  auto chunk = [&](const std::string& type, const std::string& data) {
    const uint32_t crc = Crc32(type + data);
    return be32(static_cast<uint32_t>(data.size())) + type + data + be32(crc);
  };
  std::string ihdr = be32(width) + be32(height) + std::string("\x08\x02\x00\x00\x00", 5);
  // A valid zlib stream of one stored block: far fewer bytes than the header promises.
  std::string idat("\x78\x01\x01\x04\x00\xFB\xFF\x00\x00\x00\x00\x00\x04\x00\x01", 15);
  return std::string("\x89PNG\r\n\x1A\n", 8) + chunk("IHDR", ihdr) + chunk("IDAT", idat) +
         chunk("IEND", "");
}

inline std::string MakeShardsBinary() { return COLONNADE_MAKE_SHARDS; }

// The shared real-data folder: $COLONNADE_SHARED_DATA, else <project root>/../shared/data.
inline std::string SharedDataDir() {
  const char* env = getenv("COLONNADE_SHARED_DATA");
  if (env && *env) return env;
  return std::string(COLONNADE_SOURCE_DIR) + "/../shared/data";
}

}  // namespace colonnade::data::testing
