#include "hdf5/hdf5.h"

namespace colonnade::hdf5 {
namespace {

std::recursive_mutex& Mutex() {
  static std::recursive_mutex* mu = new std::recursive_mutex();  // leaked: used at exit
  return *mu;
}

herr_t InnermostCallback(unsigned n, const H5E_error2_t* err, void* data) {
  // H5E_WALK_UPWARD visits the innermost (most specific) error first.
  auto* out = static_cast<std::string*>(data);
  if (n == 0 && err != nullptr && err->desc != nullptr) *out = err->desc;
  return 0;
}

}  // namespace

void SilenceErrorPrinting() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

namespace {
// The main thread's setting, made before main() runs (see hdf5.h). This object file is
// linked into every program that uses Scope, so the initialiser always runs with it.
[[maybe_unused]] const bool kMainThreadSilenced = (SilenceErrorPrinting(), true);
}  // namespace

Scope::Scope() : lock_(Mutex()) { SilenceErrorPrinting(); }

std::string LastError() {
  std::string s;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, InnermostCallback, &s);
  return s;
}

}  // namespace colonnade::hdf5
