// The state-dict reader against files Python's torch.save wrote
// (tests/oracle/fixtures, made by tests/oracle/make_state_dict_fixtures.py),
// and against corrupt archives.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <caffe2/serialize/inline_container.h>

#include <fstream>
#include <string>
#include <vector>

#include "actkit/converters/state_dict.h"
#include "actkit/core/errors.h"
#include "test_util.h"

using namespace actkit;
using actkit::test::bitwise_equal;
using actkit::test::TempDir;

#ifndef ACTKIT_STATE_DICT_FIXTURES
#error "tests/CMakeLists.txt defines ACTKIT_STATE_DICT_FIXTURES (the fixture folder)"
#endif

namespace {

std::string fixture(const std::string& name) { return std::string(ACTKIT_STATE_DICT_FIXTURES) + "/" + name; }

// The module the fixtures' state dict comes from, with the same names:
// nn.Sequential(Conv2d(3, 4, 3), BatchNorm2d(4), Flatten(), Linear(4, 2)).
torch::nn::Sequential fixture_module(int64_t linear_in = 4) {
  return torch::nn::Sequential(torch::nn::Conv2d(3, 4, 3), torch::nn::BatchNorm2d(4), torch::nn::Flatten(),
                               torch::nn::Linear(linear_in, 2));
}

const std::vector<std::string> kFixtureNames = {
    "0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked",
    "3.weight", "3.bias"};

// What the fixture script stores in entry i: arange(numel) * 0.5 + i in the
// tensor's shape, or 7 + i for the int64 num_batches_tracked.
at::Tensor expected_entry(size_t i, const at::Tensor& like) {
  if (like.scalar_type() == at::kLong) return at::full(like.sizes(), int64_t(7 + i), at::kLong);
  return (at::arange(like.numel(), like.options()) * 0.5 + double(i)).reshape(like.sizes());
}

void expect_fixture_state(const torch::OrderedDict<std::string, at::Tensor>& state) {
  ASSERT_EQ(state.size(), kFixtureNames.size());
  for (size_t i = 0; i < state.size(); ++i) {
    const auto& item = state.items()[i];
    EXPECT_EQ(item.key(), kFixtureNames[i]);  // the file's order
    EXPECT_TRUE(bitwise_equal(item.value(), expected_entry(i, item.value()))) << item.key();
  }
}

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const char* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data, std::streamsize(size));
}

// The records of a torch.save archive, without the version record (the
// writer adds its own).
std::vector<std::pair<std::string, std::string>> archive_records(const std::string& path) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  std::vector<std::pair<std::string, std::string>> records;
  for (const std::string& name : reader.getAllRecords()) {
    if (name == "version" || name == ".data/version") continue;
    auto [data, size] = reader.getRecord(name);
    records.emplace_back(name, std::string(static_cast<const char*>(data.get()), size));
  }
  return records;
}

void write_archive(const std::string& path, const std::vector<std::pair<std::string, std::string>>& records) {
  caffe2::serialize::PyTorchStreamWriter writer(path);
  for (const auto& [name, data] : records) writer.writeRecord(name, data.data(), data.size());
  writer.writeEndOfFile();
}

// Reading `path` either succeeds or throws FormatError: nothing else, and
// (under the sanitizer build) no read outside the file's records.
void expect_read_or_format_error(const std::string& path, const std::string& what) {
  try {
    read_state_dict(path);
  } catch (const FormatError&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": not a FormatError: " << e.what();
  }
}

}  // namespace

TEST(StateDict, ReadsPythonsOrderedDictWithMetadata) {
  // torch.save(model.state_dict()): a collections.OrderedDict with _metadata.
  expect_fixture_state(read_state_dict(fixture("ordered_dict.pt")));
}

TEST(StateDict, ReadsPythonsPlainDictAndPickleProtocol4) {
  expect_fixture_state(read_state_dict(fixture("plain_dict.pt")));  // torch.save(dict(sd))
  expect_fixture_state(read_state_dict(fixture("protocol4.pt")));   // torch.save(sd, pickle_protocol=4)
}

TEST(StateDict, LoadsPythonsFileIntoAModuleStrictly) {
  auto module = fixture_module();
  const LoadReport report = load_state_dict(*module, fixture("ordered_dict.pt"));
  EXPECT_EQ(report.loaded, kFixtureNames.size());
  EXPECT_TRUE(report.missing.empty());
  EXPECT_TRUE(report.unexpected.empty());
  const auto params = module->named_parameters();
  const auto buffers = module->named_buffers();
  for (size_t i = 0; i < kFixtureNames.size(); ++i) {
    const std::string& name = kFixtureNames[i];
    const at::Tensor t = params.contains(name) ? params[name] : buffers[name];
    EXPECT_TRUE(bitwise_equal(t, expected_entry(i, t))) << name;
  }
}

TEST(StateDict, RejectedFileLeavesTheModuleUntouched) {
  auto module = fixture_module(/*linear_in=*/3);  // 3.weight is (2, 3), the file's (2, 4)
  const at::Tensor before = module->named_parameters()["0.weight"].clone();
  try {
    load_state_dict(*module, fixture("ordered_dict.pt"));
    ADD_FAILURE() << "a shape mismatch loaded";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("3.weight"), std::string::npos) << e.what();
  }
  // 0.weight comes before the mismatch in the file and was not copied.
  EXPECT_TRUE(bitwise_equal(module->named_parameters()["0.weight"], before));
}

TEST(StateDict, ReadsViewsDtypesParametersScalarsAndEmptyTensors) {
  const auto state = read_state_dict(fixture("views_and_dtypes.pt"));
  const at::Tensor base = at::arange(24, at::kFloat).reshape({4, 6});
  EXPECT_TRUE(bitwise_equal(state["base"], base));
  // Python saved the view with its storage offset and strides, sharing base's storage.
  const at::Tensor view = state["view"];
  EXPECT_TRUE(bitwise_equal(view, base.slice(0, 1).slice(1, 0, 6, 2)));
  EXPECT_EQ(view.storage_offset(), 6);
  EXPECT_EQ(view.strides(), c10::IntArrayRef({6, 2}));
  EXPECT_TRUE(view.storage().is_alias_of(state["base"].storage()));
  EXPECT_TRUE(bitwise_equal(state["transposed"], base.t()));
  const at::Tensor r5 = at::arange(5, at::kDouble);
  EXPECT_TRUE(bitwise_equal(state["float64"], r5 / 4));
  EXPECT_TRUE(bitwise_equal(state["float16"], (r5 / 4).to(at::kHalf)));
  EXPECT_TRUE(bitwise_equal(state["bfloat16"], (r5 / 4).to(at::kBFloat16)));
  EXPECT_TRUE(bitwise_equal(state["int64"], at::arange(5, at::kLong) - 2));
  EXPECT_TRUE(bitwise_equal(state["int32"], (at::arange(5, at::kLong) - 2).to(at::kInt)));
  EXPECT_TRUE(bitwise_equal(state["int8"], (at::arange(5, at::kLong) - 2).to(at::kChar)));
  EXPECT_TRUE(bitwise_equal(state["uint8"], (at::arange(5, at::kLong) + 250).to(at::kByte)));
  EXPECT_TRUE(bitwise_equal(state["bool"], at::tensor({1, 0, 1}, at::kLong).to(at::kBool)));
  EXPECT_TRUE(bitwise_equal(state["scalar"], at::scalar_tensor(3.5, at::kFloat)));
  EXPECT_TRUE(bitwise_equal(state["empty"], at::zeros({0, 3})));
  EXPECT_TRUE(bitwise_equal(state["parameter"], at::full({2, 2}, 1.5)));
}

TEST(StateDict, ReadsWhatSaveStateDictWrites) {
  auto a = fixture_module();
  load_state_dict(*a, fixture("ordered_dict.pt"));
  TempDir dir;
  save_state_dict(*a, dir.file("saved.pt"));
  const auto state = read_state_dict(dir.file("saved.pt"));
  EXPECT_EQ(state.size(), kFixtureNames.size());
  auto b = fixture_module();
  load_state_dict(*b, dir.file("saved.pt"));
  for (const auto& p : a->named_parameters()) EXPECT_TRUE(bitwise_equal(p.value(), b->named_parameters()[p.key()]));
  for (const auto& p : a->named_buffers()) EXPECT_TRUE(bitwise_equal(p.value(), b->named_buffers()[p.key()]));
}

TEST(StateDict, FilesThatAreNotStateDictsAreClearFormatErrors) {
  auto expect_error = [](const std::string& path, const std::string& needle) {
    try {
      read_state_dict(path);
      ADD_FAILURE() << path << " was read";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(fixture("legacy.pt"), "legacy format");  // _use_new_zipfile_serialization=False
  expect_error(fixture("tensor_not_dict.pt"), "does not hold a dict");
  expect_error(fixture("int_entry.pt"), "entry epoch is not a tensor");
  TempDir dir;
  write_bytes(dir.file("garbage.pt"), "not a torch file", 16);
  expect_error(dir.file("garbage.pt"), "is not a torch.save file");
  write_bytes(dir.file("empty.pt"), "", 0);
  expect_error(dir.file("empty.pt"), "is not a torch.save file");
  expect_error(dir.file("missing.pt"), "cannot open");
  auto module = fixture_module();
  EXPECT_THROW(load_state_dict(*module, dir.file("garbage.pt")), FormatError);
}

TEST(StateDict, CorruptArchivesAreFormatErrorsNeverOutOfBoundsReads) {
  TempDir dir;
  const std::string path = dir.file("corrupt.pt");
  const auto records = archive_records(fixture("ordered_dict.pt"));
  size_t pickle_index = 0;
  while (records[pickle_index].first != "data.pkl") ++pickle_index;
  const std::string pickle = records[pickle_index].second;

  // data.pkl cut at every length, and every byte replaced by a few values
  // that each mean something different to the pickle machine.
  auto with_pickle = [&](std::string p) {
    auto r = records;
    r[pickle_index].second = std::move(p);
    return r;
  };
  for (size_t cut = 0; cut < pickle.size(); ++cut) {
    write_archive(path, with_pickle(pickle.substr(0, cut)));
    expect_read_or_format_error(path, "data.pkl cut at " + std::to_string(cut));
  }
  const unsigned char kBytes[] = {0x00, 0xff, 'X', 'h', 'R', 0x8a};
  for (size_t pos = 0; pos < pickle.size(); ++pos) {
    for (const unsigned char b : kBytes) {
      std::string p = pickle;
      p[pos] = char(b);
      write_archive(path, with_pickle(p));
      expect_read_or_format_error(path, "data.pkl byte " + std::to_string(pos) + " set to " + std::to_string(b));
    }
  }
  // A storage record one byte short, or gone.
  for (size_t i = 0; i < records.size(); ++i) {
    if (records[i].first.rfind("data/", 0) != 0) continue;
    auto shorter = records;
    shorter[i].second.pop_back();
    write_archive(path, shorter);
    EXPECT_THROW(read_state_dict(path), FormatError) << records[i].first << " one byte short";
    auto without = records;
    without.erase(without.begin() + std::ptrdiff_t(i));
    write_archive(path, without);
    EXPECT_THROW(read_state_dict(path), FormatError) << records[i].first << " missing";
  }
  // The whole file cut anywhere.
  const std::vector<char> bytes = file_bytes(fixture("ordered_dict.pt"));
  for (size_t cut = 0; cut < bytes.size(); cut += 13) {
    write_bytes(path, bytes.data(), cut);
    EXPECT_THROW(read_state_dict(path), FormatError) << "file cut at " << cut;
  }
}
