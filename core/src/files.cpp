#include "actkit/core/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "actkit/core/errors.h"

namespace actkit::files {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, int error_number) {
  throw IoError(what + " " + path + ": " + std::strerror(error_number), error_number);
}

bool stat_of(const std::string& path, struct stat* st) { return ::stat(path.c_str(), st) == 0; }

// Removes what is at `path` (not following links), recursing into
// directories; the first failure's text goes to *error.
bool remove_tree(const std::string& path, std::string* error) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return true;
    if (error != nullptr && error->empty()) *error = path + ": " + std::strerror(errno);
    return false;
  }
  bool ok = true;
  if (S_ISDIR(st.st_mode)) {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) {
      if (error != nullptr && error->empty()) *error = path + ": " + std::strerror(errno);
      return false;
    }
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(dir)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
    }
    ::closedir(dir);
    for (const std::string& name : names) ok = remove_tree(path + "/" + name, error) && ok;
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) {
      if (error != nullptr && error->empty()) *error = path + ": " + std::strerror(errno);
      ok = false;
    }
  } else if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    if (error != nullptr && error->empty()) *error = path + ": " + std::strerror(errno);
    ok = false;
  }
  return ok;
}

}  // namespace

bool exists(const std::string& path) {
  struct stat st;
  return stat_of(path, &st);
}

bool is_directory(const std::string& path) {
  struct stat st;
  return stat_of(path, &st) && S_ISDIR(st.st_mode);
}

bool is_regular_file(const std::string& path) {
  struct stat st;
  return stat_of(path, &st) && S_ISREG(st.st_mode);
}

void create_directories(const std::string& path) {
  if (path.empty()) throw InvalidInput("create_directories: empty path");
  if (is_directory(path)) return;
  const std::string parent = parent_path(path);
  if (!parent.empty() && parent != path) create_directories(parent);
  if (::mkdir(path.c_str(), 0777) != 0 && !(errno == EEXIST && is_directory(path))) {
    fail("cannot create directory", path, errno);
  }
}

bool remove_all(const std::string& path, std::string* error) noexcept {
  try {
    return remove_tree(path, error);
  } catch (...) {  // only std::bad_alloc can come here
    return false;
  }
}

bool remove(const std::string& path) {
  if (::remove(path.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  fail("cannot remove", path, errno);
}

void rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) fail("cannot rename to " + to + ":", from, errno);
}

std::vector<std::string> list_directory(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) fail("cannot list directory", path, errno);
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  }
  const int error_number = errno;
  ::closedir(dir);
  if (error_number != 0) fail("cannot list directory", path, error_number);
  std::sort(names.begin(), names.end());
  return names;
}

uint64_t file_size(const std::string& path) {
  struct stat st;
  if (!stat_of(path, &st)) fail("cannot stat", path, errno);
  return uint64_t(st.st_size);
}

void resize_file(const std::string& path, uint64_t bytes) {
  if (::truncate(path.c_str(), off_t(bytes)) != 0) fail("cannot resize", path, errno);
}

void copy_file(const std::string& from, const std::string& to) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) fail("cannot open", from, errno);
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (out < 0) {
    const int e = errno;
    ::close(in);
    fail("cannot create", to, e);
  }
  std::vector<char> buffer(size_t(1) << 20);
  for (;;) {
    const ssize_t n = ::read(in, buffer.data(), buffer.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(in);
      ::close(out);
      fail("cannot read", from, e);
    }
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out, buffer.data() + done, size_t(n - done));
      if (w < 0) {
        if (errno == EINTR) continue;
        const int e = errno;
        ::close(in);
        ::close(out);
        fail("cannot write", to, e);
      }
      done += w;
    }
  }
  ::close(in);
  if (::close(out) != 0) fail("cannot write", to, errno);
}

std::string temp_directory() {
  const char* base = std::getenv("TMPDIR");
  return base != nullptr && *base != '\0' ? std::string(base) : std::string("/tmp");
}

std::string parent_path(const std::string& path) {
  size_t end = path.size();
  while (end > 1 && path[end - 1] == '/') --end;  // trailing slashes
  const size_t slash = path.rfind('/', end - 1);
  if (slash == std::string::npos) return "";
  if (slash == 0) return "/";
  size_t cut = slash;
  while (cut > 1 && path[cut - 1] == '/') --cut;
  return path.substr(0, cut);
}

std::string read_link(const std::string& path) {
  std::string target(256, '\0');
  for (;;) {
    const ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
    if (n < 0) fail("cannot read link", path, errno);
    if (size_t(n) < target.size()) {
      target.resize(size_t(n));
      return target;
    }
    target.resize(target.size() * 2);
  }
}

}  // namespace actkit::files
