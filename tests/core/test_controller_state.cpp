// Controller::save_state / load_state: a restored controller compresses as
// the one it was saved from; bytes that are not its state are refused and
// change nothing.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "actkit/core/checksum.h"
#include "actkit/core/controller.h"
#include "actkit/core/errors.h"
#include "actkit/core/level.h"
#include "test_util.h"

namespace actkit {
namespace {

// Two layers saving batches of 8 samples whose ranges differ by layer, with
// gradients that differ by layer: L3's per-sample bits, per-layer budgets
// and rounding counters all move.
void run_iterations(Controller& c, int first, int count) {
  for (int it = first; it < first + count; ++it) {
    at::manual_seed(100 + it);
    c.save(0, at::randn({8, 700}) * at::linspace(0.1, 3.0, 8).unsqueeze(1));
    c.save(1, at::randn({8, 300}));
    c.record_gradient(0, at::randn({8, 16}) * 10);
    c.record_gradient(1, at::randn({8, 16}) * 0.1);
    c.step();
  }
}

std::unique_ptr<Controller> make_controller(const std::string& level = "L3", uint64_t seed = 7,
                                            const char* second = "block.fc") {
  auto c = std::make_unique<Controller>(parse_level(level), seed);
  c->register_layer("block.conv", LayerKind::kConv);
  c->register_layer(second, LayerKind::kLinear);
  return c;
}

// The payloads one more iteration's saves produce, and the budgets after it.
std::vector<std::vector<uint8_t>> next_payloads(Controller& c) {
  at::manual_seed(999);
  const at::Tensor x = at::randn({8, 700}) * at::linspace(0.1, 3.0, 8).unsqueeze(1);
  std::vector<std::vector<uint8_t>> out;
  out.push_back(test::payload_bytes(c.save(0, x).load()));
  out.push_back(test::payload_bytes(c.save(1, at::randn({8, 300})).load()));
  return out;
}

TEST(ControllerState, ARestoredControllerCompressesAsTheSavedOneGoesOn) {
  auto saved = make_controller();
  run_iterations(*saved, 0, 4);
  const std::vector<uint8_t> state = saved->save_state();

  auto restored = make_controller();
  restored->load_state(state);
  EXPECT_EQ(restored->save_state(), state);
  EXPECT_EQ(restored->layer_bits(0), saved->layer_bits(0));
  EXPECT_EQ(restored->stats().iterations, 4);
  EXPECT_EQ(next_payloads(*restored), next_payloads(*saved));

  // What the checkpoint is for: a fresh controller (counters at zero, equal
  // budgets) compresses the same tensors otherwise.
  auto fresh = make_controller();
  auto again = make_controller();
  again->load_state(state);
  EXPECT_NE(next_payloads(*fresh), next_payloads(*again));
}

TEST(ControllerState, IsTakenBetweenStepsOnly) {
  auto c = make_controller();
  run_iterations(*c, 0, 1);
  c->save(0, at::randn({8, 700}));  // per-sample bits recorded, waiting for step()
  EXPECT_THROW(c->save_state(), InvalidInput);
  c->step();
  c->record_gradient(1, at::randn({8, 16}));  // a norm waiting for step()
  EXPECT_THROW(c->save_state(), InvalidInput);
  c->step();
  EXPECT_NO_THROW(c->save_state());
}

TEST(ControllerState, BytesThatAreNotThisControllersStateAreRefusedAndChangeNothing) {
  auto source = make_controller();
  run_iterations(*source, 0, 3);
  const std::vector<uint8_t> state = source->save_state();

  auto target = make_controller();
  run_iterations(*target, 10, 2);
  const std::vector<uint8_t> before = target->save_state();
  auto refused = [&](const std::vector<uint8_t>& bytes, const std::string& why) {
    SCOPED_TRACE(why);
    EXPECT_THROW(target->load_state(bytes), FormatError);
    EXPECT_EQ(target->save_state(), before);
  };
  // Every truncation, and a flipped bit anywhere.
  for (size_t n = 0; n < state.size(); ++n) refused(std::vector<uint8_t>(state.begin(), state.begin() + n), "cut");
  for (size_t i = 0; i < state.size(); i += 7) {
    std::vector<uint8_t> flipped = state;
    flipped[i] ^= 0x10;
    refused(flipped, "flipped byte " + std::to_string(i));
  }
  // With the checksum made right again, the parser itself must refuse.
  const auto resealed = [](std::vector<uint8_t> bytes) {
    const uint32_t crc = crc32c(bytes.data(), bytes.size() - 4);
    std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
    return bytes;
  };
  std::vector<uint8_t> longer = state;
  longer.insert(longer.end() - 4, 0);
  refused(resealed(longer), "a byte too many");
  std::vector<uint8_t> huge_name = state;
  const uint32_t big = 0xfffffff0u;
  std::memcpy(huge_name.data() + 32, &big, 4);  // the first layer's name length
  refused(resealed(huge_name), "a name longer than the state");
  std::vector<uint8_t> version = state;
  version[4] = 9;
  refused(resealed(version), "another version");

  // Well-formed states of another controller: layers, level, seed.
  const auto other = [&](const std::function<std::unique_ptr<Controller>()>& make) {
    auto c = make();
    run_iterations(*c, 0, 1);
    return c->save_state();
  };
  refused(other([] { return make_controller("L3", 7, "block.proj"); }), "another layer name");
  refused(other([] { return make_controller("L3:bits=3", 7); }), "another bit budget");
  refused(other([] { return make_controller("L2", 7); }), "uniform bits");
  refused(other([] { return make_controller("L3", 8); }), "another seed");
  auto three = std::make_unique<Controller>(parse_level("L3"), 7);
  three->register_layer("block.conv", LayerKind::kConv);
  three->register_layer("block.fc", LayerKind::kLinear);
  three->register_layer("head", LayerKind::kLinear);
  three->step();
  refused(three->save_state(), "three layers");

  target->load_state(state);  // the real one still loads
  EXPECT_EQ(target->save_state(), state);
}

}  // namespace
}  // namespace actkit
