// Where to cut a chain of model pieces into pipeline stages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace actkit::pipeline {

// Cuts pieces with costs `costs` (parameter counts, or measured forward
// times) into `stages` contiguous, non-empty ranges so that the largest
// range's total cost is as small as it can be (ties: earlier cuts later,
// so early stages take more). Returns stages + 1 boundaries: stage s runs
// pieces [result[s], result[s + 1]). Throws InvalidInput when there are
// fewer pieces than stages, or a cost is negative or not finite.
std::vector<int> balance_stages(const std::vector<double>& costs, int stages);

// "params" or "time". Throws InvalidInput otherwise.
enum class BalanceBy { kParameters, kTime };
BalanceBy parse_balance(const std::string& text);  // params (or parameters) | time
const char* to_string(BalanceBy by);               // "params", "time"

}  // namespace actkit::pipeline
