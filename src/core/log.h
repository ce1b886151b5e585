// A small logging module (Debian's Abseil 20220623 has no absl/log).
//
//   LOG(INFO) << "step " << step;    // "I 10:42:01.123 [r0] step 3"
//   CHECK(cond) << "context";        // aborts with file:line and the message
//   CHECK_EQ(a, b) << "context";
//
// CHECK is for programming errors only; bad input from users returns absl::Status.
#pragma once

#include <sstream>
#include <string>

namespace colonnade {
namespace log_internal {

enum Severity { kInfo, kWarning, kError, kFatal };

class Message {
 public:
  Message(Severity s, const char* file, int line);
  ~Message();  // emits; aborts for kFatal
  std::ostream& stream() { return stream_; }

 private:
  Severity severity_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

// Swallows the stream when a CHECK passes.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace log_internal

// Prefix "[r<rank>]" on every line once the rank is known (set by the parallel layer).
void SetLogRank(int rank);
// Minimum severity printed (0 info, 1 warning, 2 error).
void SetLogLevel(int level);

}  // namespace colonnade

#define COLONNADE_LOG_INFO ::colonnade::log_internal::kInfo
#define COLONNADE_LOG_WARNING ::colonnade::log_internal::kWarning
#define COLONNADE_LOG_ERROR ::colonnade::log_internal::kError
#define COLONNADE_LOG_FATAL ::colonnade::log_internal::kFatal

#define LOG(sev) \
  ::colonnade::log_internal::Message(COLONNADE_LOG_##sev, __FILE__, __LINE__).stream()

#define CHECK(cond)                                                                            \
  (cond) ? (void)0                                                                             \
         : ::colonnade::log_internal::Voidify() &                                              \
               ::colonnade::log_internal::Message(::colonnade::log_internal::kFatal, __FILE__, \
                                                  __LINE__)                                    \
                       .stream()                                                               \
                   << "Check failed: " #cond " "

#define COLONNADE_CHECK_OP(a, b, op)                                                               \
  ((a)op(b)) ? (void)0                                                                             \
             : ::colonnade::log_internal::Voidify() &                                              \
                   ::colonnade::log_internal::Message(::colonnade::log_internal::kFatal, __FILE__, \
                                                      __LINE__)                                    \
                           .stream()                                                               \
                       << "Check failed: " #a " " #op " " #b " (" << (a) << " vs " << (b) << ") "

#define CHECK_EQ(a, b) COLONNADE_CHECK_OP(a, b, ==)
#define CHECK_NE(a, b) COLONNADE_CHECK_OP(a, b, !=)
#define CHECK_LE(a, b) COLONNADE_CHECK_OP(a, b, <=)
#define CHECK_LT(a, b) COLONNADE_CHECK_OP(a, b, <)
#define CHECK_GE(a, b) COLONNADE_CHECK_OP(a, b, >=)
#define CHECK_GT(a, b) COLONNADE_CHECK_OP(a, b, >)
