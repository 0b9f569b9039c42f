// torch.save's files are zip archives whose every record carries a CRC-32;
// LibTorch's readers do not check it. These read such a file whole and
// check every record before anything in it is used, so a flipped bit or a
// truncated write is refused naming the file and the record, not trained on.
#pragma once

#include <torch/serialize/output-archive.h>

#include <string>

namespace actkit {

// `archive` serialized in memory (so a full disk meets files::write_*,
// which name the file, not LibTorch's writer, which aborts).
std::string archive_bytes(torch::serialize::OutputArchive& archive);

// The bytes of the zip archive at `path`, every record checked: the
// central directory and local headers within the file and consistent, no
// two records of one name (in any case), every record stored (torch.save's)
// or deflated (LibTorch's archives compress their code records; inflated in
// bounded pieces, to exactly the size recorded), and its bytes matching the
// CRC-32 the archive recorded. Every pickle record (data.pkl, constants.pkl,
// code/*.debug_pkl) is then walked without building a value
// (converters/src/pickle/pickle_check.h), so that no unpickler, LibTorch's
// unbounded one included, meets values nested more than 64 deep, a stack
// that underflows, a memo entry never stored, or a storage its record does
// not hold. Throws FormatError naming `path` (and the record) for anything
// else, IoError if it cannot be read.
std::string read_checked_archive(const std::string& path);

// The same checks over an archive already in memory; `what` names it.
void check_archive(const std::string& bytes, const std::string& what);

}  // namespace actkit
