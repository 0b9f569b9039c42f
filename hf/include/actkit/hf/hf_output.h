// The folder a --save-hf writes: ACTkit writes a Hugging Face folder only
// into a folder that is new, empty or one it wrote before (it lists what it
// wrote in OUT/.actkit-hf-files), and never over the folder the model came
// from unless the caller says so. A save into a folder it wrote before
// removes what the earlier save wrote and this one did not (a tokenizer
// file the new source lacks), so the folder holds one model, not two.
#pragma once

#include <string>
#include <vector>

namespace actkit {

// Whether `out` is the folder `source` (the same folder, by device and
// inode, whatever the spelling). False when either is missing.
bool same_folder(const std::string& out, const std::string& source);

// Before anything runs: throws InvalidInput naming `flag` and `out` when
// `out` is `source` and `replace_source` is false, or when `out` exists and
// is not a folder, or is a non-empty folder ACTkit did not write (one of
// its entries named) and is not `source`; IoError when it cannot be read.
// Makes nothing.
void check_hf_output(const std::string& out, const std::string& source, bool replace_source,
                     const std::string& flag);

// Before the first file of a save: makes `out` if missing and, unless it
// is `source`, lists it as ACTkit's (so a save killed part-way can be
// retried into it). Throws IoError naming the folder.
void begin_hf_output(const std::string& out, const std::string& source);

// After every file of a save is in `out` (`written`: their names, relative
// to `out`): removes the files an earlier ACTkit save listed and this one
// did not write, and the weight files this save replaces (a sharded index
// and its shards, pytorch_model.bin) when the folder is the source
// replaced in place; then lists `written` in OUT/.actkit-hf-files. Throws
// IoError naming the file.
void finish_hf_output(const std::string& out, const std::vector<std::string>& written);

}  // namespace actkit
