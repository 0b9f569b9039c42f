#include "json_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"

namespace actkit::text {
namespace {

// Tokenizer files nest a handful of levels; a bound keeps a hostile file's
// nesting from exhausting the stack.
constexpr int kMaxDepth = 64;

}  // namespace

std::string read_bounded_file(const std::string& path) {
  const uint64_t size = files::file_size(path);
  if (size > kMaxTokenizerFileBytes) {
    throw FormatError(path + ": " + std::to_string(size) + " bytes, more than the " +
                      std::to_string(kMaxTokenizerFileBytes >> 20) + " MiB a tokenizer file may have");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(path + ": cannot open: " + std::strerror(errno), errno);
  std::string bytes(size_t(size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : 0;
      ::close(fd);
      throw IoError(path + ": short read: " + (n < 0 ? std::strerror(error) : "the file shrank"), error);
    }
    done += size_t(n);
  }
  ::close(fd);
  return bytes;
}

nlohmann::json read_json_file(const std::string& path) { return parse_json_text(read_bounded_file(path), path); }

nlohmann::json parse_json_text(const std::string& bytes, const std::string& path) {
  const auto depth_bound = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxDepth) throw FormatError(path + ": JSON nested deeper than " + std::to_string(kMaxDepth));
    return true;
  };
  try {
    return nlohmann::json::parse(bytes, depth_bound);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(path + ": not valid JSON: " + e.what());
  }
}

}  // namespace actkit::text
