// The AQ-SGD kind of StageBoundaries (aqsgd_boundaries.cpp), made by
// StageBoundaries::make.
#pragma once

#include <cstdint>
#include <memory>

#include "actkit/pipeline/stage_boundaries.h"

namespace actkit::pipeline {

// Opens (at `resume_step` >= 0: reopens) the m(ξ) stores of each side
// `at` holds and compares them with the other sides. Throws as
// StageBoundaries::make says.
std::unique_ptr<StageBoundaries> make_aqsgd_boundaries(Communicator& comm, const PipelineConfig& config,
                                                       const StagePosition& at, int64_t resume_step);

}  // namespace actkit::pipeline
