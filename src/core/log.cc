#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace colonnade {
namespace {
std::atomic<int> g_rank{-1};
std::atomic<int> g_level{0};
std::mutex g_mu;
}  // namespace

void SetLogRank(int rank) { g_rank = rank; }
void SetLogLevel(int level) { g_level = level; }

namespace log_internal {

Message::Message(Severity s, const char* file, int line) : severity_(s), file_(file), line_(line) {}

Message::~Message() {
  if (severity_ >= g_level || severity_ == kFatal) {
    auto now = std::chrono::system_clock::now();
    std::time_t t = std::chrono::system_clock::to_time_t(now);
    int ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
        1000);
    std::tm tm;
    localtime_r(&t, &tm);
    static const char kLetters[] = "IWEF";
    char prefix[64];
    int r = g_rank;
    if (r >= 0) {
      std::snprintf(prefix, sizeof(prefix), "%c %02d:%02d:%02d.%03d [r%d] ", kLetters[severity_],
                    tm.tm_hour, tm.tm_min, tm.tm_sec, ms, r);
    } else {
      std::snprintf(prefix, sizeof(prefix), "%c %02d:%02d:%02d.%03d ", kLetters[severity_],
                    tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
    }
    std::string text = stream_.str();
    std::lock_guard<std::mutex> lock(g_mu);
    if (severity_ >= kError) {
      const char* base = file_;
      for (const char* p = file_; *p; ++p)
        if (*p == '/') base = p + 1;
      std::fprintf(stderr, "%s%s:%d: %s\n", prefix, base, line_, text.c_str());
    } else {
      std::fprintf(stderr, "%s%s\n", prefix, text.c_str());
    }
    std::fflush(stderr);
  }
  if (severity_ == kFatal) std::abort();
}

}  // namespace log_internal
}  // namespace colonnade
