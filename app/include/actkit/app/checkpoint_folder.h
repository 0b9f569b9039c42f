// A checkpoint folder that no crash leaves half-written, for every training
// command (actkit train, one writer; actkit dp and actkit pipeline, whose
// ranks each write part of a checkpoint).
// A save goes to DIR/step-<N>/; once every rank has written its part, rank
// 0 points DIR/latest at it (a file written whole, the commit) and removes
// the older step folders. A reader follows DIR/latest, so it finds the last
// whole checkpoint: a rank killed mid-save leaves the previous one as it was.
// The layout is in docs/formats.md.
#pragma once

#include <cstdint>
#include <string>

namespace actkit::app {

// DIR/step-<step>. Throws InvalidInput for a negative step.
std::string step_folder(const std::string& dir, int64_t step);

// Ownership: ACTkit removes and replaces only what it wrote. A checkpoint
// folder is marked as ACTkit's (DIR/.actkit-checkpoints) when a run first
// claims it, and each step folder it writes holds a marker of its own
// (step-<N>/.actkit-step); a folder that is neither missing, empty nor
// marked is someone else's and is never saved into.

// Before any rank starts: throws InvalidInput naming `flag`, DIR and one of
// its entries when DIR exists and is neither empty nor ACTkit's, IoError
// when it cannot be read or another run holds it (files::FolderLock).
// Makes nothing.
void check_checkpoint_folder(const std::string& dir, const std::string& flag);

// Rank 0, holding DIR's files::FolderLock: checks DIR again as above, marks
// it as ACTkit's, and removes the temporary files a killed run of ours left
// at its top (latest.tmp.*, model.pt.tmp.*). Throws as above, or IoError.
void claim_checkpoint_folder(const std::string& dir, const std::string& flag);

// Every rank, before writing its part of step `step`: makes
// step_folder(dir, step) and its marker, and returns the folder. Throws
// IoError naming the folder.
std::string begin_step_folder(const std::string& dir, int64_t step);

// Rank 0, after every rank's files of step `step` are in step_folder(dir,
// step): writes DIR/latest whole, then removes the other step folders that
// ACTkit wrote (those holding its marker; any other stays). Throws IoError
// naming the file if the commit cannot be written (the previous commit then
// stands).
void commit_checkpoint(const std::string& dir, int64_t step);

// Where DIR's last committed checkpoint is: step_folder(DIR, N) for the N
// DIR/latest names; DIR itself when it has no DIR/latest (a folder saved
// before commits existed, or one that never finished a save, which the
// caller then finds empty). Throws FormatError naming DIR/latest when it
// is malformed or names a folder that is not there.
std::string committed_folder(const std::string& dir);

}  // namespace actkit::app
