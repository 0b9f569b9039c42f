#include "actkit/app/run_progress.h"

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <cmath>
#include <exception>

#include "actkit/comm/comm_error.h"
#include "actkit/core/errors.h"

namespace actkit::app {

void check_finite_loss(double loss, int64_t step, int rank, bool allow) {
  if (allow || std::isfinite(loss)) return;
  throw Error(c10::str("step ", step, ": the training loss is ", loss, " on rank ", rank,
                       "; the run stops (a lower --lr, or --allow-non-finite to go on)"));
}

void rethrow_with_context(const std::string& context) {
  const std::string at = context + ": ";
  try {
    throw;
  } catch (const CommError& e) {
    throw CommError(at + e.what(), e.peer());
  } catch (const IoError& e) {
    throw IoError(at + e.what(), e.error_number());
  } catch (const FormatError& e) {
    throw FormatError(at + e.what());
  } catch (const InvalidInput& e) {
    throw InvalidInput(at + e.what());
  } catch (const OutOfMemory& e) {
    throw OutOfMemory(at + e.what());
  } catch (const Error& e) {
    throw Error(at + e.what());
  } catch (const c10::Error& e) {
    throw Error(at + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw Error(at + e.what());
  }
}

}  // namespace actkit::app
