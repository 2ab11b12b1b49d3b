// Tutorial 4: a training loop in about 40 lines. What TrainingRun (app/train.cpp) and the
// single-device engine (parallel/stage.cpp) do for every mini-batch, written out by hand:
// forward, cross-entropy loss, backward, SGD step. Synthetic data: 3 classes, points near 3
// centres in the plane; the loss must fall and the accuracy rise.
#include <cstdio>
#include <vector>

#include <echelon/echelon.h>

using namespace echelon;

int main() {
  Generator gen(1);
  // Data: 3 x 100 points, class k centred at (2cos(2pi k/3), 2sin(2pi k/3)), noise 0.5.
  const int64_t per_class = 100, classes = 3, n = per_class * classes;
  const Tensor centres = Tensor::from_vector<float>({2, 0, -1, 1.732f, -1, -1.732f}, {3, 2});
  std::vector<int64_t> label_values(n);
  for (int64_t i = 0; i < n; ++i) label_values[i] = i / per_class;
  const Tensor labels = Tensor::from_vector(label_values, {n});          // (N) int64
  const Tensor points = ops::add(ops::index_select(centres, 0, labels),  // (N, 2)
                                 ops::mul(ops::randn({n, 2}, gen), 0.5));

  // Model and optimizer. SGD keeps handles to the parameters; step() updates them in place.
  Sequential model;
  model.push_back(std::make_shared<Linear>(2, 16, gen));
  model.push_back(std::make_shared<ReLU>());
  model.push_back(std::make_shared<Linear>(16, classes, gen));
  SGD sgd(model.parameters(), SGDOptions{.lr = 0.1, .momentum = 0.9});

  double first_loss = 0, loss_value = 0;
  const int64_t batch = 30;
  for (int epoch = 0; epoch < 20; ++epoch) {
    const Tensor order = ops::randperm(n, gen);  // a new shuffle every epoch
    for (int64_t start = 0; start < n; start += batch) {
      const Tensor idx = order.narrow(0, start, batch);
      const Tensor x = ops::index_select(points, 0, idx);  // (B, 2)
      const Tensor y = ops::index_select(labels, 0, idx);  // (B)
      Tensor loss = cross_entropy(model.forward(x), y);    // forward: (B, 2) -> (B, 3) -> ()
      sgd.zero_grad();                                     // drop last step's gradients
      backward(loss);                                      // fills p.grad() of every parameter
      sgd.step();                                          // p -= lr * momentum buffer
      loss_value = loss.item<float>();
      if (epoch == 0 && start == 0) first_loss = loss_value;
    }
  }
  NoGradGuard no_grad;  // evaluation: no graph
  const Tensor predicted = ops::argmax(model.forward(points), 1);
  const double accuracy = ops::mean(ops::cast(ops::eq(predicted, labels), kFloat32)).item<float>();
  std::printf("loss %.4f -> %.4f, training accuracy %.3f\n", first_loss, loss_value, accuracy);
  const bool ok = loss_value < 0.5 * first_loss && accuracy > 0.9;
  std::printf("%s\n", ok ? "the loss went down" : "training FAILED");
  return ok ? 0 : 1;
}
