#include "actkit/core/enum_names.h"
#include "actkit/pipeline/stage_split.h"

#include <c10/util/StringUtil.h>

#include <cmath>
#include <limits>

#include "actkit/core/errors.h"

namespace actkit::pipeline {

std::vector<int> balance_stages(const std::vector<double>& costs, int stages) {
  const int n = int(costs.size());
  if (stages < 1 || n < stages) {
    throw InvalidInput(c10::str("cannot cut ", n, " model pieces into ", stages, " non-empty stages"));
  }
  for (double c : costs) {
    if (!std::isfinite(c) || c < 0) throw InvalidInput(c10::str("stage balance: piece cost ", c, " is not >= 0"));
  }
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  // best[s][i]: the smallest possible largest-stage cost when pieces
  // [0, i) form s stages; cut[s][i] the start of the last of them. n and
  // stages are small (layers and machines), so O(stages · n²) is nothing.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s) {
    for (int i = s; i <= n; ++i) {
      for (int j = s - 1; j < i; ++j) {
        const double v = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        if (v <= best[s][i]) {  // <=: the latest cut wins, so earlier stages take more
          best[s][i] = v;
          cut[s][i] = j;
        }
      }
    }
  }
  std::vector<int> bounds(stages + 1);
  bounds[stages] = n;
  for (int s = stages, i = n; s > 0; --s) {
    i = cut[s][i];
    bounds[s - 1] = i;
  }
  return bounds;
}

namespace {
constexpr EnumName<BalanceBy> kBalanceNames[] = {
    {BalanceBy::kParameters, "params"}, {BalanceBy::kTime, "time"}, {BalanceBy::kParameters, "parameters"}};
}  // namespace

BalanceBy parse_balance(const std::string& text) { return parse_enum(kBalanceNames, text, "balance"); }

const char* to_string(BalanceBy by) { return enum_name(kBalanceNames, by); }

}  // namespace actkit::pipeline
