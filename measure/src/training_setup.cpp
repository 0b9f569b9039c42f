#include "actkit/measure/training_setup.h"


namespace actkit {

void TrainingSetup::step() {
  converted.controller->reset_gradients(model->parameters());
  model->loss(input, model->forward(input), labels).backward();
  optimizer->step();
  converted.controller->step();
}

TrainingSetup make_training_setup(const std::string& model, ModelOptions options, int64_t length, int64_t batch,
                                  const LevelConfig& level, uint64_t seed, at::Device device) {
  at::manual_seed(int64_t(seed));
  options.image_size = length;
  TrainingSetup s;
  s.model = make_model(model, options);
  s.model->to(device);
  s.converted = convert(*s.model, level, seed);
  s.model->train();
  s.input = s.model->example_input(batch, length).to(device);
  s.labels = s.model->example_labels(s.input);
  s.optimizer = std::make_unique<torch::optim::SGD>(s.model->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  return s;
}

}  // namespace actkit
