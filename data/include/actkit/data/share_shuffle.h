// The order a data set's training examples are read in: an endless stream
// of epochs, each a permutation seeded by (seed, epoch), and with `shares`
// > 1 one stream per share over the ids share, share + shares, ...
// (⌊n / shares⌋ of them, so every share's epoch has the same length),
// shuffled by (seed, epoch, share). Share 0 of 1 is the whole set.
#pragma once

#include <cstdint>
#include <vector>

namespace actkit {

class ShareShuffle {
 public:
  // The id at `position` of share `share`'s stream over `n` examples.
  // Remembers the last epoch's permutation, so reading a stream in order
  // draws each permutation once (not thread-safe). Throws InvalidInput for
  // a negative position, a share outside [0, shares), or more shares than
  // examples.
  int64_t id_at(int64_t n, int64_t position, uint64_t seed, int share = 0, int shares = 1) const;

 private:
  mutable std::vector<int64_t> order_;
  mutable int64_t epoch_ = -1, n_ = -1;
  mutable uint64_t seed_ = 0;
  mutable int share_ = 0, shares_ = 1;
};

}  // namespace actkit
