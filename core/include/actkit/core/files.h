// File-system operations on paths, over POSIX calls.
//
// Why not std::filesystem: PyTorch's wheels (LibTorch 2.x) export their own
// statically linked copy of libstdc++'s std::filesystem from
// libtorch_cpu.so, and the dynamic linker binds every program's (and even
// libstdc++'s own) std::filesystem calls to that copy, since libtorch_cpu.so
// is loaded before libstdc++.so. Code compiled with another g++ then runs
// against an implementation its inline parts were not compiled for
// (pytorch/pytorch#133437). ACTkit calls none of it: these functions use
// only the C library, so they mean the same under every LibTorch. The
// build checks that no ACTkit binary references std::filesystem
// (scripts/check-layering.sh, scripts/test.sh).
//
// Errors: functions that throw throw IoError naming the path and the
// system error; none follows a symbolic link it is asked to remove.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace actkit::files {

// Whether `path` exists (following links), is a directory, is a regular
// file. False when it or a folder on its way is missing; IoError for any
// other failure (no permission, a loop of links), as std::filesystem does.
bool exists(const std::string& path);
bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);

// Creates `path` and any missing parents (mode 0777 less the umask). An
// existing directory is fine; an existing non-directory throws.
void create_directories(const std::string& path);

// Removes `path`: a file, a link (not its target) or a directory with
// everything in it, descending through descriptors opened without following
// links (a link swapped in meanwhile is removed, not followed). A missing
// path is fine. Returns false and leaves the
// system error's text in *error (when given) if anything could not be
// removed; never throws (destructors call it).
bool remove_all(const std::string& path, std::string* error = nullptr) noexcept;

// Removes one file or empty directory. Returns false if it did not exist;
// throws for any other failure.
bool remove(const std::string& path);

// Renames `from` to `to` (atomically replacing `to`, on one file system).
void rename(const std::string& from, const std::string& to);

// Writing a file so that a crash, a full disk or a second writer never
// leaves it half-written: the bytes go to a new temporary file beside it
// (created exclusively, never through a planted link), which is flushed to
// the disk, renamed over `path`, and the folder flushed too. Until the
// rename the old file is untouched. Throws IoError naming `path` and the
// cause (ENOSPC: "No space left on device"), the temporary file removed.
// For ACTkit's own files (in its checkpoint folders): whatever is at
// `path` is replaced, a planted link included.
void write_file_atomic(const std::string& path, const void* data, size_t size);

// Writing a file at a path the user named (--json, --save FILE, --plot):
// write_in_place when output_way says kInPlace, so that /dev/null or
// /dev/stdout stay what they are; else write_file_atomic.
void write_output_file(const std::string& path, const void* data, size_t size);

// How a user's output path is written. kReplace: `path` is missing or a regular
// file: the atomic write above. kInPlace: `path` is a character device
// (/dev/null, a terminal), a FIFO or a link (/dev/stdout is one): its bytes
// go through it, and the node stays what it was. Throws IoError naming
// `path` for a folder, a block device, a socket or a link to nothing.
enum class OutputWay { kReplace, kInPlace };
OutputWay output_way(const std::string& path);
// Writes `size` bytes through `path` (output_way: kInPlace): a regular file
// reached through a link is truncated first and flushed to the disk; the
// file this process's standard output or error already is (/dev/stdout,
// /proc/self/fd/2) is written through that descriptor, after what was
// printed there. A FIFO without a reader is an IoError at once, not a wait.
void write_in_place(const std::string& path, const void* data, size_t size);
// The two halves, for files that must appear together (a checkpoint's
// parameters and optimizer state): write_temporary writes and flushes the
// temporary file and returns its name; commit_file renames it to `path`
// and flushes the folder.
std::string write_temporary(const std::string& path, const void* data, size_t size);
void commit_file(const std::string& temporary, const std::string& path);

// Throws IoError naming `path` unless a file can be written there now: its
// folder exists and takes a new file (one is made and removed), and `path`
// is not a folder; a path written in place (output_way) must be writable,
// and nothing is made beside it. For output paths, checked before a run
// spends its time.
void check_writable_file(const std::string& path);
// The same for a folder of outputs (a checkpoint folder): made if missing,
// with its parents, and a file made and removed in it. Throws IoError
// naming `dir`.
void check_writable_folder(const std::string& dir);

// An exclusive claim on folder `dir` (created if missing) for as long as
// the object lives: a lock (flock) on dir/.actkit-lock, which records the
// holder's process id. Another process asking for the same folder is
// refused, naming the holder; the lock goes when the holder ends, however
// it ends. Throws IoError when the folder cannot be made or is held.
class FolderLock {
 public:
  explicit FolderLock(const std::string& dir);
  ~FolderLock();
  // For a reader of `dir` (a run resuming from it): throws IoError naming
  // the holder while another process holds the folder's lock; makes nothing.
  static void check_free(const std::string& dir);
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

// The names in directory `path` (not "." or ".."), sorted.
std::vector<std::string> list_directory(const std::string& path);

// Size in bytes of the file at `path` (IoError for a folder).
uint64_t file_size(const std::string& path);
// Truncates or extends the file at `path` to `bytes`.
void resize_file(const std::string& path, uint64_t bytes);
// Copies the file `from` to `to` with its permission bits, replacing `to`
// (IoError when both name one file).
void copy_file(const std::string& from, const std::string& to);

// The first of $TMPDIR, $TMP, $TEMP, $TEMPDIR that is set and non-empty,
// else /tmp.
std::string temp_directory();
// A new folder in `parent` named `prefix` and six random characters, made
// by this call alone (mkdtemp: never one that existed, never through a
// planted link) and readable by this user only. Returns its path; throws
// IoError naming `parent` when it cannot be made.
std::string make_private_directory(const std::string& parent, const std::string& prefix);
// `path` without its last component, trailing slashes ignored ("a/b" -> "a",
// "a/b/" -> "a", "/a" -> "/", "a" -> "").
std::string parent_path(const std::string& path);
// The target of the symbolic link `path`.
std::string read_link(const std::string& path);
// The whole content of the regular file `path`. Throws IoError naming it
// when it cannot be read, and FormatError when it holds more than
// `max_bytes` (configuration files: a bound before anything is allocated).
std::string read_small_file(const std::string& path, uint64_t max_bytes);

}  // namespace actkit::files
