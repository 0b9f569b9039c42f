#include "cuda_driver.h"

#include <dlfcn.h>

#include <string>

#include "actkit/core/errors.h"

namespace actkit::detail {
namespace {

#define ACTKIT_STRINGIFY_NAME(x) #x
// The symbol after cuda.h's macros: cuCtxPushCurrent -> "cuCtxPushCurrent_v2".
#define ACTKIT_SYMBOL_OF(x) ACTKIT_STRINGIFY_NAME(x)

CudaDriver load() {
  // Never unloaded: the pointers live as long as the process.
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = ::dlerror();
    throw Error(std::string("CUDA virtual memory needs the CUDA driver (libcuda.so.1), which could not be loaded: ") +
                (why != nullptr ? why : "not found"));
  }
  CudaDriver d;
#define ACTKIT_CUDA_DRIVER_LOAD(name)                                                                      \
  d.name = reinterpret_cast<decltype(d.name)>(::dlsym(library, ACTKIT_SYMBOL_OF(name)));                   \
  if (d.name == nullptr) {                                                                                 \
    throw Error(std::string("the CUDA driver (libcuda.so.1) lacks ") + ACTKIT_SYMBOL_OF(name) +            \
                ": CUDA virtual memory needs a driver of CUDA 10.2 or later");                             \
  }
  ACTKIT_CUDA_DRIVER_FUNCTIONS(ACTKIT_CUDA_DRIVER_LOAD)
#undef ACTKIT_CUDA_DRIVER_LOAD
  return d;
}

}  // namespace

const CudaDriver& cuda_driver() {
  static const CudaDriver driver = load();  // a failed load throws, and the next call tries again
  return driver;
}

}  // namespace actkit::detail
