#include "actkit/core/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "actkit/core/errors.h"
#include "write_fully.h"

namespace actkit::files {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, int error_number) {
  throw IoError(what + " " + path + ": " + std::strerror(error_number), error_number);
}

// stat() of `path`: true if it exists; false if it (or a folder on the
// way) does not; throws for any other failure (permissions, a loop of
// links), as std::filesystem's queries do.
bool stat_of(const std::string& path, struct stat* st) {
  if (::stat(path.c_str(), st) == 0) return true;
  if (errno == ENOENT || errno == ENOTDIR) return false;
  fail("cannot stat", path, errno);
}

void note(std::string* error, const std::string& path, int error_number) {
  if (error != nullptr && error->empty()) *error = path + ": " + std::strerror(error_number);
}

// Removes entry `name` of the open folder `parent` (AT_FDCWD: the working
// folder), recursing into folders through descriptors opened with
// O_NOFOLLOW, so a link swapped in while this runs is removed, never
// followed. The first failure's text goes to *error.
bool remove_at(int parent, const std::string& name, const std::string& shown, std::string* error) {
  struct stat st;
  if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return true;
    note(error, shown, errno);
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(parent, name.c_str(), 0) != 0 && errno != ENOENT) {
      note(error, shown, errno);
      return false;
    }
    return true;
  }
  const int fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    note(error, shown, errno);
    return false;
  }
  DIR* dir = ::fdopendir(fd);  // owns fd from here
  if (dir == nullptr) {
    note(error, shown, errno);
    ::close(fd);
    return false;
  }
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(dir);
    if (e == nullptr) break;
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  }
  bool ok = errno == 0;
  if (!ok) note(error, shown, errno);
  for (const std::string& child : names) ok = remove_at(::dirfd(dir), child, shown + "/" + child, error) && ok;
  ::closedir(dir);
  if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    note(error, shown, errno);
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
  if (::mkdir(path.c_str(), 0777) != 0) {
    const int error_number = errno;
    if (error_number != EEXIST || !is_directory(path)) fail("cannot create directory", path, error_number);
  }
}

bool remove_all(const std::string& path, std::string* error) noexcept {
  try {
    std::string target = path;
    while (target.size() > 1 && target.back() == '/') target.pop_back();  // "link/" would follow the link
    return target.empty() || remove_at(AT_FDCWD, target, target, error);
  } catch (...) {  // only std::bad_alloc can come here
    return false;
  }
}

bool remove(const std::string& path) {
  if (::remove(path.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  fail("cannot remove", path, errno);
}

std::string write_temporary(const std::string& path, const void* data, size_t size) {
  // Unique per process and call, so two writers never share one.
  static std::atomic<uint64_t> counter{0};
  const std::string temporary = c10::str(path, ".tmp.", ::getpid(), ".", counter++);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) fail("cannot write", path, errno);
  int error_number = detail::write_fully(fd, data, size);
  if (error_number == 0 && ::fsync(fd) != 0) error_number = errno;
  if (::close(fd) != 0 && error_number == 0) error_number = errno;
  if (error_number != 0) {
    ::unlink(temporary.c_str());
    fail("cannot write", path, error_number);
  }
  return temporary;
}

void commit_file(const std::string& temporary, const std::string& path) {
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error_number = errno;
    ::unlink(temporary.c_str());
    fail("cannot write", path, error_number);
  }
  // The rename itself reaches the disk with the folder's entry.
  std::string folder = parent_path(path);
  if (folder.empty()) folder = ".";
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    const int rc = ::fsync(fd);
    const int error_number = errno;
    ::close(fd);
    if (rc != 0 && error_number != EINVAL) fail("cannot flush the folder of", path, error_number);
  }
}

void check_writable_file(const std::string& path) {
  if (path.empty()) throw IoError("an empty output path", EINVAL);
  if (is_directory(path)) fail("cannot write", path, EISDIR);
  if (output_way(path) == OutputWay::kInPlace) {
    if (::access(path.c_str(), W_OK) != 0) fail("cannot write", path, errno);
    return;
  }
  std::string folder = parent_path(path);
  if (folder.empty()) folder = ".";
  if (!is_directory(folder)) fail("cannot write", path, ENOENT);
  // A file made and removed beside it: what the final write will do (root
  // passes access(), yet /proc or a read-only mount refuses the file).
  const std::string probe = c10::str(path, ".probe.", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) fail("cannot write", path, errno);
  ::close(fd);
  ::unlink(probe.c_str());
}

void check_writable_folder(const std::string& dir) {
  if (dir.empty()) throw IoError("an empty output folder", EINVAL);
  if (exists(dir) && !is_directory(dir)) fail("cannot save to", dir, ENOTDIR);
  try {
    create_directories(dir);
  } catch (const IoError& e) {
    fail("cannot save to", dir, e.error_number());
  }
  const std::string probe = c10::str(dir, "/.actkit-probe.", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) fail("cannot save to", dir, errno);
  ::close(fd);
  ::unlink(probe.c_str());
}

namespace {

constexpr const char* kLockFile = "/.actkit-lock";

// Takes `how` (LOCK_EX or LOCK_SH, never waiting) on the open lock file `fd`
// of `dir`; when another process holds it, closes `fd` and throws naming the
// holder its note records.
void lock_or_name_holder(int fd, int how, const std::string& dir) {
  if (::flock(fd, how | LOCK_NB) == 0) return;
  const int error_number = errno;
  char holder[32] = {};
  const ssize_t n = ::pread(fd, holder, sizeof(holder) - 1, 0);
  ::close(fd);
  if (error_number == EWOULDBLOCK) {
    throw IoError(c10::str(dir, " is in use by another run (process ", n > 0 ? std::string(holder, size_t(n)) : "?",
                           "): give each run a folder of its own, or wait for that one to end"),
                  EBUSY);
  }
  fail("cannot lock", dir, error_number);
}

}  // namespace

void FolderLock::check_free(const std::string& dir) {
  const std::string file = dir + kLockFile;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return;  // never locked
    fail("cannot read the lock of", dir, errno);
  }
  lock_or_name_holder(fd, LOCK_SH, dir);
  ::close(fd);  // releases the shared lock at once
}

FolderLock::FolderLock(const std::string& dir) {
  create_directories(dir);
  const std::string file = dir + kLockFile;
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) fail("cannot lock", dir, errno);
  const int fd = fd_;
  fd_ = -1;  // closed by lock_or_name_holder if it throws
  lock_or_name_holder(fd, LOCK_EX, dir);
  fd_ = fd;
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    // The lock holds without the note; only the message to a second run is poorer.
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
  commit_file(write_temporary(path, data, size), path);
}

void rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) fail("cannot rename to " + to + ":", from, errno);
}

std::vector<std::string> list_directory(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) fail("cannot list directory", path, errno);
  std::vector<std::string> names;
  int error_number = 0;
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(dir);
    if (e == nullptr) {
      error_number = errno;
      break;
    }
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  }
  ::closedir(dir);
  if (error_number != 0) fail("cannot list directory", path, error_number);
  std::sort(names.begin(), names.end());
  return names;
}

uint64_t file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) fail("cannot stat", path, errno);
  if (S_ISDIR(st.st_mode)) fail("no file size for", path, EISDIR);
  return uint64_t(st.st_size);
}

std::string read_small_file(const std::string& path, uint64_t max_bytes) {
  // O_NONBLOCK: a FIFO planted in the file's place must not hang the open
  // (the check below refuses it; regular files ignore the flag).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("cannot open", path, errno);
  std::string out;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno != 0 ? errno : EINVAL;
    ::close(fd);
    fail("cannot read (not a regular file)", path, err);
  }
  if (uint64_t(st.st_size) > max_bytes) {
    ::close(fd);
    throw FormatError(c10::str(path, ": ", st.st_size, " bytes, more than the ", max_bytes, " expected of it"));
  }
  out.resize(size_t(st.st_size));
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      fail("cannot read", path, err);
    }
    done += size_t(n);
  }
  ::close(fd);
  return out;
}

void resize_file(const std::string& path, uint64_t bytes) {
  if (::truncate(path.c_str(), off_t(bytes)) != 0) fail("cannot resize", path, errno);
}

void copy_file(const std::string& from, const std::string& to) {
  std::vector<char> buffer(size_t(1) << 20);  // before any descriptor is open
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) fail("cannot open", from, errno);
  struct stat source;
  if (::fstat(in, &source) != 0) {
    const int e = errno;
    ::close(in);
    fail("cannot stat", from, e);
  }
  struct stat target;
  if (::stat(to.c_str(), &target) == 0 && target.st_dev == source.st_dev && target.st_ino == source.st_ino) {
    ::close(in);
    fail("cannot copy a file onto itself:", to, EINVAL);  // O_TRUNC would empty both
  }
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, source.st_mode & 0777);
  if (out < 0) {
    const int e = errno;
    ::close(in);
    fail("cannot create", to, e);
  }
  auto give_up = [&](const std::string& what, const std::string& path, int e) {
    ::close(in);
    ::close(out);
    fail(what, path, e);
  };
  for (;;) {
    const ssize_t n = ::read(in, buffer.data(), buffer.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      give_up("cannot read", from, errno);
    }
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out, buffer.data() + done, size_t(n - done));
      if (w < 0) {
        if (errno == EINTR) continue;
        give_up("cannot write", to, errno);
      }
      done += w;
    }
  }
  ::close(in);
  if (::close(out) != 0) fail("cannot write", to, errno);
}

std::string temp_directory() {
  for (const char* name : {"TMPDIR", "TMP", "TEMP", "TEMPDIR"}) {  // the variables libstdc++ reads
    const char* base = std::getenv(name);
    if (base != nullptr && *base != '\0') return base;
  }
  return "/tmp";
}

std::string make_private_directory(const std::string& parent, const std::string& prefix) {
  std::string name = parent + "/" + prefix + "-XXXXXX";
  if (::mkdtemp(name.data()) == nullptr) fail("cannot make a private folder in", parent, errno);
  return name;
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
